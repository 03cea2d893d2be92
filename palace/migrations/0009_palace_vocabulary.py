from django.db import migrations, models


def record_vocabulary(apps, schema_editor):
    # The palace's vocabulary from this migration on: the environment's choice for a new palace, the
    # Rust palazzo's (the old default) for one that already holds memories, so they all still validate.
    from palace.schema.vocabulary import record_first_vocabulary

    record_first_vocabulary(
        palace_vocabulary=apps.get_model("palace", "PalaceVocabulary"),
        id_allocator=apps.get_model("palace", "IdAllocator"),
    )


class Migration(migrations.Migration):
    dependencies = [("palace", "0008_wake_up_snapshot")]

    operations = [
        migrations.CreateModel(
            name="PalaceVocabulary",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "preset",
                    models.CharField(help_text="The preset it started from; custom once edited.", max_length=64),
                ),
                ("wings", models.JSONField(default=list)),
                ("halls", models.JSONField(default=list)),
                ("categories", models.JSONField(default=list)),
                ("changed_at", models.DateTimeField(auto_now=True)),
            ],
            options={"verbose_name_plural": "palace vocabulary"},
        ),
        migrations.RunPython(record_vocabulary, migrations.RunPython.noop),
    ]
