from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('router', '0003_config_version'),
    ]

    operations = [
        migrations.AddField(
            model_name='backend',
            name='drained',
            field=models.BooleanField(default=False, help_text='No new requests (an operator\'s drain); config and probes stay.'),
        ),
    ]
