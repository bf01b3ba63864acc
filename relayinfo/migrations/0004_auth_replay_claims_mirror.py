# Which replay claims were copied here from Redis (relaycore.edge.nip98): only the others keep
# the copying on. A constant default: PostgreSQL adds the column without rewriting the table.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('relayinfo', '0003_staff_nostr_keys'),
    ]

    operations = [
        migrations.AddField(
            model_name='authreplayclaim',
            name='mirror',
            field=models.BooleanField(db_default=False, default=False),
        ),
    ]
