# The fleet's item-4 episodes (each owes a sync epoch bump when it closes) and, per instance,
# whether its relay key was generated at start-up (readiness item 5 seen by buzz-admin).
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("relayinfo", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="FleetEpisode",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "opened_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("opened_epoch", models.BigIntegerField()),
                ("reason", models.TextField()),
                ("closed_at", models.DateTimeField(blank=True, null=True)),
                ("closed_epoch", models.BigIntegerField(blank=True, null=True)),
            ],
            options={
                "db_table": "fleet_episodes",
            },
        ),
        # db_default: instances of an older version, which do not name the column, still insert.
        migrations.AddField(
            model_name="relayinstance",
            name="key_generated",
            field=models.BooleanField(db_default=False, default=False),
        ),
    ]
