"""The unmanaged Queue model: no table, only its content type and permissions."""

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Queue",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
            ],
            options={
                "verbose_name": "queue",
                "verbose_name_plural": "queues",
                "managed": False,
                "default_permissions": ("view", "change"),
            },
        ),
    ]
