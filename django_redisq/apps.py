from django.apps import AppConfig


class RedisQConfig(AppConfig):
    name = "django_redisq"
    label = "django_redisq"
    verbose_name = "Task queue"
    default_auto_field = "django.db.models.AutoField"
