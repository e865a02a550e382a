from django.db import migrations

# The journal is append-only: the database itself refuses UPDATE and DELETE, whichever code
# path tries. (TRUNCATE, an administrator's tool that test databases use to reset, stays.)
FORBID = """
CREATE FUNCTION memory_journal_is_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the journal is append-only: % on memory_journalevent is refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER memory_journal_append_only
    BEFORE UPDATE OR DELETE ON memory_journalevent
    FOR EACH ROW EXECUTE FUNCTION memory_journal_is_append_only();
"""
ALLOW = """
DROP TRIGGER memory_journal_append_only ON memory_journalevent;
DROP FUNCTION memory_journal_is_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [migrations.RunSQL(FORBID, ALLOW)]
