# The table each model would have, named so that no model reads the database backend at start (models.py); no SQL:
# DeadLetter has no table (managed = False) and the others are its proxies.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('django_redisq', '0005_workflow_page'),
    ]

    operations = [
        migrations.AlterModelTable(
            name='deadletter',
            table='django_redisq_deadletter',
        ),
        migrations.AlterModelTable(
            name='pendingtask',
            table='django_redisq_deadletter',
        ),
        migrations.AlterModelTable(
            name='queue',
            table='django_redisq_deadletter',
        ),
        migrations.AlterModelTable(
            name='runningtask',
            table='django_redisq_deadletter',
        ),
        migrations.AlterModelTable(
            name='schedule',
            table='django_redisq_deadletter',
        ),
        migrations.AlterModelTable(
            name='scheduledtask',
            table='django_redisq_deadletter',
        ),
        migrations.AlterModelTable(
            name='topic',
            table='django_redisq_deadletter',
        ),
        migrations.AlterModelTable(
            name='workflow',
            table='django_redisq_deadletter',
        ),
    ]
