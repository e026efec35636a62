from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.urls import path

from django_redisq import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics/", views.metrics),
    path("metrics/staff/", staff_member_required(views.metrics)),
    path("metrics/token/", views.token_required(views.metrics)),
]
