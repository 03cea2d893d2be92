from django.db import migrations


def create_allocator(apps, schema_editor):
    IdAllocator = apps.get_model("palace", "IdAllocator")
    IdAllocator.objects.get_or_create(pk=1, defaults={"next_id": 1_000_000_000})


class Migration(migrations.Migration):
    dependencies = [("palace", "0001_initial")]
    operations = [migrations.RunPython(create_allocator, migrations.RunPython.noop)]
