"""NIP-11 relay information per community (relayinfo/nip11.py): eight columns on `communities`.

Safe on a populated database, and while the previous release still serves: each text column is
added with a constant default the database keeps (`db_default=""`: no row is rewritten or
backfilled, and an older relay inserting a community without these columns gets the default),
and `max_content_length` is nullable, without a CHECK constraint (one would be validated by a
scan; the service checks the value). One transaction under the short lock and statement
budgets of artifacts.schema, like 0077: when a long transaction holds `communities`, the ALTER
gives up within 2 s instead of queueing every writer behind it, and `buzz-admin migrate`
retries. Reversed, the columns are dropped (a catalog change).
"""

from django.db import migrations, models

from artifacts.migrations import _sync_steps


def short_budgets(apps, schema_editor):  # type: ignore[no-untyped-def]
    _sync_steps.set_migration_budgets(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("artifacts", "0078_artifact_sync_indexes")]

    operations = [
        # Forwards the budgets come first; backwards the last operation runs first.
        migrations.RunPython(short_budgets, migrations.RunPython.noop),
        migrations.AddField(
            model_name="community",
            name="description",
            field=models.TextField(
                blank=True, db_default="",
                help_text="blank: the deployment's default, RELAY_INFO_DESCRIPTION",
            ),
        ),
        migrations.AddField(
            model_name="community",
            name="contact",
            field=models.CharField(
                blank=True, db_default="", max_length=500,
                help_text="the admins' address: an email address or a mailto:/https: URI",
            ),
        ),
        migrations.AddField(
            model_name="community",
            name="icon",
            field=models.CharField(
                blank=True, db_default="", max_length=500, help_text='URL of a square image'
            ),
        ),
        migrations.AddField(
            model_name="community",
            name="banner",
            field=models.CharField(
                blank=True, db_default="", max_length=500, help_text='URL of a wide image'
            ),
        ),
        migrations.AddField(
            model_name="community",
            name="terms_of_service",
            field=models.CharField(
                blank=True, db_default="", max_length=500, help_text='URL'
            ),
        ),
        migrations.AddField(
            model_name="community",
            name="privacy_policy",
            field=models.CharField(
                blank=True, db_default="", max_length=500, help_text='URL'
            ),
        ),
        migrations.AddField(
            model_name="community",
            name="posting_policy",
            field=models.CharField(
                blank=True, db_default="", max_length=500, help_text='URL'
            ),
        ),
        migrations.AddField(
            model_name="community",
            name="max_content_length",
            field=models.IntegerField(
                blank=True, null=True,
                help_text="the most characters of an event's content"
                " (limitation.max_content_length); empty: the deployment's"
                " RELAY_INFO_MAX_CONTENT_LENGTH",
            ),
        ),
        migrations.RunPython(migrations.RunPython.noop, short_budgets),
    ]
