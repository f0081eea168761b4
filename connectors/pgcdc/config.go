package pgcdc

import (
	"regexp"
	"strings"

	"github.com/reignpipe/reignpipe/connectors/rowcols"
)

// Config is the postgres source's own keys (source.dsn, source.table, ...), beside the keys
// every source reads: source.name is the id prefix (default: the table's name without its
// schema), source.max_doc_bytes bounds a row's text.
//
// There is no version column: a document's version is the position of its change in the
// server's log (see Version), which orders a row's inserts, updates and deletes as the server
// committed them; a column the application writes could not order a delete, which has no row.
type Config struct {
	DSN         string   `yaml:"dsn" default:"PG* env" doc:"libpq connection string or URL of the database holding the table; the role needs REPLICATION (or superuser) and the server wal_level = logical"`
	Table       string   `yaml:"table" default:"—" doc:"the table to follow, schema-qualified or on the search_path (public.docs, docs)"`
	IDColumn    string   `yaml:"id_column" default:"id" doc:"the column whose value is the document id; it must be the primary key or the replica identity, so a delete names it"`
	TitleColumn string   `yaml:"title_column" default:"none" doc:"the column holding the title; empty: documents have no title"`
	TextColumns []string `yaml:"text_columns" default:"[text]" doc:"the columns whose values, joined by a blank line, are the text; NULL or empty ones are left out"`
	Slot        string   `yaml:"slot" default:"reignpipe_<pipeline name>" doc:"the logical replication slot (pgoutput) the source follows; created when missing"`
	Publication string   `yaml:"publication" default:"reignpipe_<pipeline name>" doc:"the publication of the table's inserts, updates and deletes; created when missing"`
}

// DefaultConfig is the configuration of a postgres source whose keys are left out.
func DefaultConfig() Config {
	return Config{IDColumn: "id", TextColumns: []string{"text"}}
}

// identifier is what this source accepts as a slot or publication name: what PostgreSQL
// takes unquoted in a replication command (lower case, digits, underscore; at most 63 bytes).
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Validate reports the first bad value through bad, by its key ("text_columns").
func (c Config) Validate(bad func(key, format string, args ...any) error) error {
	switch {
	case strings.TrimSpace(c.Table) == "":
		return bad("table", "name the table to follow, e.g. table: public.docs")
	case c.Slot != "" && !identifier.MatchString(c.Slot):
		return bad("slot", "%q is not a slot name: lower-case letters, digits and _, at most 63, not starting with a digit", c.Slot)
	case c.Publication != "" && !identifier.MatchString(c.Publication):
		return bad("publication", "%q is not a publication name: lower-case letters, digits and _, at most 63, not starting with a digit", c.Publication)
	}
	return rowcols.Check(c.IDColumn, c.TitleColumn, c.TextColumns, bad)
}

// DerivedName is the slot and publication name a pipeline gets by default: reignpipe_ and its
// name, lower-cased, other characters than letters and digits as _, cut to 63 bytes.
func DerivedName(pipeline string) string {
	var b strings.Builder
	b.WriteString("reignpipe_")
	for _, r := range strings.ToLower(pipeline) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 63 {
		s = s[:63]
	}
	return s
}

// names is the slot and publication after defaults.
func (c Config) names(pipeline string) (slot, publication string) {
	slot, publication = c.Slot, c.Publication
	if slot == "" {
		slot = DerivedName(pipeline)
	}
	if publication == "" {
		publication = DerivedName(pipeline)
	}
	return slot, publication
}
