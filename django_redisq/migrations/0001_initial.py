from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="DeadLetter",
            fields=[
                ("id", models.CharField(max_length=300, primary_key=True, serialize=False)),
            ],
            options={
                "verbose_name": "dead letter",
                "verbose_name_plural": "dead letters",
                "managed": False,
                "default_permissions": ("view", "change"),
            },
        ),
    ]
