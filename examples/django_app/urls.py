"""The example site's routes."""

from django.urls import path

from examples.django_app import views

urlpatterns = [path("signups", views.sign_up)]
