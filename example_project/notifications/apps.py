from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "example_project.notifications"
    verbose_name = "Workshop notifications"
