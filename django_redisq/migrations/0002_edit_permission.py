from django.db import migrations


class Migration(migrations.Migration):
    """The "edit" permission: changing a dead letter's arguments before a replay runs its task with them."""

    dependencies = [("django_redisq", "0001_initial")]

    operations = [
        migrations.AlterModelOptions(
            name="deadletter",
            options={
                "verbose_name": "dead letter",
                "verbose_name_plural": "dead letters",
                "managed": False,
                "default_permissions": ("view", "change"),
                "permissions": [("edit_deadletter", "Can edit a dead letter's arguments and replay it (runs its task with them)")],
            },
        ),
    ]
