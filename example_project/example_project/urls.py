from django.contrib import admin
from django.urls import path
from shop import views

urlpatterns = [
    path("", views.place_order, name="place-order"),
    path("orders/<int:pk>/", views.order_detail, name="order-detail"),
    path("admin/", admin.site.urls),
]
