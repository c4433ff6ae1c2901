import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("filestore", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="Batch",
            fields=[
                ("id", models.CharField(max_length=40, primary_key=True, serialize=False)),
                ("owner", models.CharField(blank=True, max_length=200)),
                ("owner_name", models.CharField(blank=True, max_length=200)),
                ("endpoint", models.CharField(max_length=40)),
                ("input_file_id", models.CharField(max_length=40)),
                ("completion_window", models.CharField(max_length=8)),
                ("metadata", models.JSONField(blank=True, null=True)),
                ("status", models.CharField(db_index=True, max_length=16)),
                ("model", models.CharField(blank=True, max_length=200)),
                ("total", models.IntegerField(default=0)),
                ("completed", models.IntegerField(default=0)),
                ("failed", models.IntegerField(default=0)),
                ("errors", models.JSONField(blank=True, null=True)),
                ("output_file_id", models.CharField(blank=True, max_length=40, null=True)),
                ("error_file_id", models.CharField(blank=True, max_length=40, null=True)),
                ("created_at", models.BigIntegerField()),
                ("expires_at", models.BigIntegerField()),
                ("in_progress_at", models.BigIntegerField(blank=True, null=True)),
                ("finalizing_at", models.BigIntegerField(blank=True, null=True)),
                ("completed_at", models.BigIntegerField(blank=True, null=True)),
                ("failed_at", models.BigIntegerField(blank=True, null=True)),
                ("expired_at", models.BigIntegerField(blank=True, null=True)),
                ("cancelling_at", models.BigIntegerField(blank=True, null=True)),
                ("cancelled_at", models.BigIntegerField(blank=True, null=True)),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "indexes": [models.Index(fields=["owner", "created_at", "id"], name="filestore_batch_owner_created")],
            },
        ),
        migrations.CreateModel(
            name="BatchLine",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("line", models.IntegerField()),
                ("ok", models.BooleanField()),
                ("output", models.TextField()),
                (
                    "batch",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="lines", to="filestore.batch"
                    ),
                ),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("batch", "line"), name="filestore_batchline_once")],
            },
        ),
    ]
