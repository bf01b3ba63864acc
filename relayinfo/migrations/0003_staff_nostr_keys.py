# The Nostr key each staff user may sign in to the console with (relayinfo.nostr_login).

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('relayinfo', '0002_fleet_episodes_and_key_generated'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='StaffNostrKey',
            fields=[
                ('id', models.BigAutoField(
                    auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('pubkey', models.CharField(max_length=64, unique=True)),
                ('user', models.OneToOneField(
                    on_delete=django.db.models.deletion.CASCADE, related_name='nostr_key',
                    to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'db_table': 'staff_nostr_keys',
            },
        ),
    ]
