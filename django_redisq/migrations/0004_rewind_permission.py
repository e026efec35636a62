from django.db import migrations


class Migration(migrations.Migration):
    """The "rewind" permission: rewinding a topic's subscription runs its task again for every retained event."""

    dependencies = [("django_redisq", "0003_admin_pages")]

    operations = [
        migrations.AlterModelOptions(
            name="deadletter",
            options={
                "verbose_name": "dead letter",
                "verbose_name_plural": "dead letters",
                "managed": False,
                "default_permissions": ("view", "change"),
                "permissions": [
                    ("edit_deadletter", "Can edit a dead letter's arguments and replay it (runs its task with them)"),
                    ("rewind_topic", "Can rewind a topic subscription (re-runs its retained events)"),
                ],
            },
        ),
    ]
