package debezium

import (
	"bufio"
	"os"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/reignpipe/reignpipe/schemas"
)

func decoder(t testing.TB, cfg Config, source string) *Decoder {
	t.Helper()
	d, err := NewDecoder(cfg, source)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// wrap gives a bare envelope the JsonConverter's schemas.enable=true wrapper (a schema that
// says nothing the decoder reads: it must not matter).
func wrap(payload string) string {
	return `{"schema":{"type":"struct","fields":[],"optional":false,"name":"x.Envelope","version":2},"payload":` + payload + `}`
}

func TestDecode(t *testing.T) {
	cfg := Config{IDColumn: "id", TitleColumn: "title", TextColumns: []string{"summary", "body"}}
	src := func(lsn string) string {
		return `"source":{"version":"3.6.1.Final","connector":"postgresql","name":"dbz","snapshot":"false","db":"reignpipe","schema":"public","table":"articles","txId":7,"lsn":` + lsn + `}`
	}
	cases := []struct {
		name    string
		cfg     *Config
		source  string
		payload string
		want    schemas.Document
		skip    string
		err     string // a substring of the error
	}{
		{name: "insert", payload: `{"before":null,"after":{"id":42,"title":"T","summary":"S","body":"B"},` + src("12915410152") + `,"op":"c"}`,
			want: schemas.Document{ID: "articles:42", Source: "articles", Version: "12915410152", Title: "T", Text: "S\n\nB"}},
		{name: "snapshot read", payload: `{"before":null,"after":{"id":42,"title":"T","summary":"S","body":"B"},` + src("100") + `,"op":"r"}`,
			want: schemas.Document{ID: "articles:42", Source: "articles", Version: "100", Title: "T", Text: "S\n\nB"}},
		{name: "update, a null text column left out", payload: `{"before":null,"after":{"id":42,"title":"T","summary":null,"body":"B2"},` + src("200") + `,"op":"u"}`,
			want: schemas.Document{ID: "articles:42", Source: "articles", Version: "200", Title: "T", Text: "B2"}},
		{name: "delete from the before image (primary key only)", payload: `{"before":{"id":42,"title":null,"summary":null,"body":null},"after":null,` + src("300") + `,"op":"d"}`,
			want: schemas.Document{ID: "articles:42", Source: "articles", Version: "300", Deleted: true}},
		{name: "a row with no text is a deletion", payload: `{"before":null,"after":{"id":42,"title":"T","summary":null,"body":"  "},` + src("400") + `,"op":"u"}`,
			want: schemas.Document{ID: "articles:42", Source: "articles", Version: "400", Deleted: true}},
		{name: "source.name prefixes the ids", source: "kb", payload: `{"after":{"id":"a-1","title":null,"summary":"S","body":"B"},` + src("1") + `,"op":"c"}`,
			want: schemas.Document{ID: "kb:a-1", Source: "kb", Version: "1", Text: "S\n\nB"}},
		{name: "a bigint id exactly, text_separator, numbers and booleans as text",
			cfg:     &Config{IDColumn: "id", TextColumns: []string{"body", "n", "ok"}, TextSeparator: ptr(" | ")},
			payload: `{"after":{"tenant":"acme","id":9007199254740993,"body":"B","n":1.5,"ok":true},` + src("5") + `,"op":"c"}`,
			want:    schemas.Document{ID: "articles:9007199254740993", Source: "articles", Version: "5", Text: "B | 1.5 | true"}},
		{name: "tombstone (null value)", payload: `null`, skip: SkipTombstone},
		{name: "logical message", payload: `{"op":"m",` + src("9") + `}`, skip: SkipMessage},
		{name: "truncate", payload: `{"op":"t",` + src("9") + `}`, err: `op "t" at lsn 9: a TRUNCATE`},
		{name: "unknown op", payload: `{"op":"x",` + src("9") + `}`, err: `unknown op "x"`},
		{name: "no op", payload: `{"id":1,"text":"a reignpipe raw document"}`, err: "no op"},
		{name: "not JSON", payload: `{"op":`, err: "not a Debezium change event"},
		{name: "no lsn", payload: `{"after":{"id":1,"title":"T","summary":"S","body":"B"},"source":{"table":"articles"},"op":"c"}`, err: "is not a log position"},
		{name: "lsn not digits", payload: `{"after":{"id":1,"title":"T","summary":"S","body":"B"},"source":{"table":"articles","lsn":-5},"op":"c"}`, err: "is not a log position"},
		{name: "delete without the id column", payload: `{"before":{"other":1},"after":null,` + src("9") + `,"op":"d"}`, err: `the row has no column "id"`},
		{name: "delete with a null id (not the primary key)", payload: `{"before":{"id":null,"title":null,"summary":null,"body":null},` + src("9") + `,"op":"d"}`, err: "must be the table's primary key"},
		{name: "delete, replica identity nothing", payload: `{"before":null,"after":null,` + src("9") + `,"op":"d"}`, err: "REPLICA IDENTITY is NOTHING"},
		{name: "missing text column", payload: `{"after":{"id":1,"title":"T","body":"B"},` + src("9") + `,"op":"c"}`, err: `no column "summary"`},
		{name: "unchanged TOASTed text", payload: `{"after":{"id":1,"title":"T","summary":"S","body":"` + Unavailable + `"},` + src("9") + `,"op":"u"}`, err: "REPLICA IDENTITY FULL"},
		{name: "struct column", payload: `{"after":{"id":1,"title":"T","summary":{"a":1},"body":"B"},` + src("9") + `,"op":"c"}`, err: "not text"},
		{name: "no table and no source.name", payload: `{"after":{"id":1,"title":"T","summary":"S","body":"B"},"source":{"lsn":1},"op":"c"}`, err: "names no source.table"},
	}
	for _, c := range cases {
		cfg := cfg
		if c.cfg != nil {
			cfg = *c.cfg
		}
		d := decoder(t, cfg, c.source)
		forms := map[string]string{"bare": c.payload, "schemas": wrap(c.payload)}
		if c.payload == "null" {
			forms = map[string]string{"null value": "", "JSON null": "null", "schemas": wrap("null")}
		}
		for form, v := range forms {
			t.Run(c.name+"/"+form, func(t *testing.T) {
				doc, skip, err := d.Decode([]byte(v))
				switch {
				case c.err != "":
					if err == nil || !strings.Contains(err.Error(), c.err) {
						t.Fatalf("error %v, want one containing %q", err, c.err)
					}
				case err != nil:
					t.Fatal(err)
				case skip != c.skip:
					t.Fatalf("skip %q, want %q", skip, c.skip)
				case !reflect.DeepEqual(doc, c.want):
					t.Fatalf("got  %+v\nwant %+v", doc, c.want)
				}
			})
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestRecordedEvents decodes what Debezium 3.6.1's PostgreSQL connector wrote through the
// JsonConverter (schemas.enable=true) for: the snapshot read of row 1, an update of it, an
// insert of row 2 and the delete of row 1 in one transaction, and the tombstone after it.
func TestRecordedEvents(t *testing.T) {
	f, err := os.Open("testdata/postgres-3.6.1-schemas.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := decoder(t, Config{IDColumn: "id", TitleColumn: "title", TextColumns: []string{"body"}}, "")
	var got []schemas.Document
	var skips []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "null" { // the console consumer's rendering of a null value
			line = ""
		}
		doc, skip, err := d.Decode([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if skip != "" {
			skips = append(skips, skip)
			continue
		}
		got = append(got, doc)
	}
	want := []schemas.Document{
		{ID: "dbz_try:1", Source: "dbz_try", Version: "12915390840", Title: "t1", Text: "b1"},
		{ID: "dbz_try:1", Source: "dbz_try", Version: "12915410064", Title: "t1", Text: "b1 changed"},
		{ID: "dbz_try:2", Source: "dbz_try", Version: "12915410152", Title: "t2", Text: "b2"},
		{ID: "dbz_try:1", Source: "dbz_try", Version: "12915410288", Deleted: true},
	}
	if len(got) != len(want) {
		t.Fatalf("%d documents, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("event %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if len(skips) != 1 || skips[0] != SkipTombstone {
		t.Errorf("skips %v, want the one tombstone", skips)
	}
	// Row 1's changes order by version: snapshot read < update < delete.
	if schemas.CompareVersions(got[0].Version, got[1].Version) >= 0 || schemas.CompareVersions(got[1].Version, got[3].Version) >= 0 {
		t.Errorf("row 1's versions do not order its changes: %s, %s, %s", got[0].Version, got[1].Version, got[3].Version)
	}
}

func TestConfigYAML(t *testing.T) {
	cases := []struct {
		yaml string
		want Config
		err  string
	}{
		{yaml: "{}\n", want: DefaultConfig()},
		{yaml: "id_column: article_id\ntitle_column: title\ntext_columns: [summary, body]\ntext_separator: ''\n",
			want: Config{IDColumn: "article_id", TitleColumn: "title", TextColumns: []string{"summary", "body"}, TextSeparator: ptr("")}},
		{yaml: "id_column: ''\n", err: "id_column: name the column"},
		{yaml: "text_columns: []\n", err: "text_columns: name at least one"},
		{yaml: "text_columns: [body, body]\n", err: `text_columns: "body" is already source.text_columns`},
		{yaml: "title_column: id\n", err: `title_column: "id" is already source.id_column`},
		{yaml: "text_columns: [body, '']\n", err: "text_columns: a column name is empty"},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		if err := yaml.Unmarshal([]byte(c.yaml), &cfg); err != nil {
			t.Fatal(err)
		}
		_, err := NewDecoder(cfg, "")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.yaml, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.yaml, err)
			continue
		}
		if !reflect.DeepEqual(cfg, c.want) {
			t.Errorf("%q: got %+v, want %+v", c.yaml, cfg, c.want)
		}
	}
}

// FuzzDecode: any value decodes to a document, a skip or an error, never a panic; a document
// has an id with the source's prefix and a version of digits, and an upsert has text.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"after":{"id":1,"title":"T","body":"B"},"source":{"table":"t","lsn":5},"op":"c"}`))
	f.Add([]byte(wrap(`{"before":{"id":"x"},"source":{"table":"t","lsn":7},"op":"d"}`)))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"schema":null,"payload":null}`))
	f.Add([]byte(`{"after":{"id":1,"title":null,"body":"` + Unavailable + `"},"source":{"table":"t","lsn":5},"op":"u"}`))
	if b, err := os.ReadFile("testdata/postgres-3.6.1-schemas.jsonl"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f.Add([]byte(line))
		}
	}
	d := decoder(f, Config{IDColumn: "id", TitleColumn: "title", TextColumns: []string{"body"}}, "")
	f.Fuzz(func(t *testing.T, v []byte) {
		doc, skip, err := d.Decode(v)
		if err != nil || skip != "" {
			if doc.ID != "" && err == nil {
				t.Fatalf("a skip with a document: %+v", doc)
			}
			return
		}
		switch {
		case doc.Source == "" || !strings.HasPrefix(doc.ID, doc.Source+":") || len(doc.ID) == len(doc.Source)+1:
			t.Fatalf("id %q, source %q", doc.ID, doc.Source)
		case strings.Trim(doc.Version, "0123456789") != "" || doc.Version == "":
			t.Fatalf("version %q", doc.Version)
		case !doc.Deleted && strings.TrimSpace(doc.Text) == "":
			t.Fatalf("an upsert without text: %+v", doc)
		case doc.Deleted && (doc.Text != "" || doc.Title != ""):
			t.Fatalf("a deletion with text: %+v", doc)
		}
	})
}
