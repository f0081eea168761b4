// Package debezium decodes Debezium change events -- a database table's inserts, updates and
// deletes, as Debezium's connectors write them to Kafka through Kafka Connect's JsonConverter
// -- into reignpipe's documents and deletion records. The Kafka connector (connectors/kafka)
// reads the topic; this package only knows the event format.
//
// An event's value is the change envelope, either wrapped with its schema
// ({"schema":…,"payload":{…}}, the JsonConverter's schemas.enable=true, its default) or bare
// (schemas.enable=false). Its op says what happened to the row:
//
//   - c (insert), r (a snapshot read), u (update): an upsert of the row after the change;
//   - d (delete): a deletion of the row's document, its id from the row before the change;
//   - a null value (the tombstone Debezium sends after a delete, for compaction): skipped.
//
// The version of every record is the change's position in the database's log (source.lsn
// for PostgreSQL), as decimal digits, so schemas.CompareVersions orders a row's changes:
// two changes of one row cannot commit out of log order (the second waits for the first's
// row lock), and a snapshot read carries the log position the snapshot was taken at, before
// every change streamed after it.
package debezium

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/reignpipe/reignpipe/connectors/rowcols"
	"github.com/reignpipe/reignpipe/schemas"
)

// Unavailable is the value Debezium's PostgreSQL connector sends for a TOASTed column an update
// did not change when the table's REPLICA IDENTITY is not FULL (its default
// unavailable.value.placeholder): the column's value is not in the change at all.
const Unavailable = "__debezium_unavailable_value"

// Config is the debezium source's keys (the source section of a pipeline whose
// transport.kafka.raw_format is debezium): which columns of the row make the document. They
// are the postgres source's keys of the same names, meaning the same.
type Config struct {
	IDColumn    string   `yaml:"id_column" default:"id" doc:"the column whose value is the document id; it must be the primary key or the replica identity, so a delete names it"`
	TitleColumn string   `yaml:"title_column" default:"none" doc:"the column holding the title; empty: documents have no title"`
	TextColumns []string `yaml:"text_columns" default:"[text]" doc:"the columns whose values, joined by a blank line, are the text; NULL or empty ones are left out"`
	// TextSeparator is a pointer so that an explicit "" (columns run together) differs from
	// the key left out.
	TextSeparator *string `yaml:"text_separator" default:"a blank line" doc:"what joins the text columns"`
}

// DefaultConfig is the configuration of a debezium source whose keys are left out.
func DefaultConfig() Config {
	return Config{IDColumn: "id", TextColumns: []string{"text"}}
}

// Validate reports the first bad value through bad, by its key ("text_columns").
func (c Config) Validate(bad func(key, format string, args ...any) error) error {
	return rowcols.Check(c.IDColumn, c.TitleColumn, c.TextColumns, bad)
}

// Decoder decodes the change events of one table (or of several with the same columns).
type Decoder struct {
	cfg       Config
	source    string // the id prefix; "" = the table the event names
	separator string
}

// NewDecoder decodes events into documents with ids "<source>:<id column>"; source ""
// takes the table's name from each event (source.table).
func NewDecoder(cfg Config, source string) (*Decoder, error) {
	if err := cfg.Validate(func(key, format string, args ...any) error {
		return fmt.Errorf("debezium: %s: %s", key, fmt.Sprintf(format, args...))
	}); err != nil {
		return nil, err
	}
	sep := "\n\n"
	if cfg.TextSeparator != nil {
		sep = *cfg.TextSeparator
	}
	return &Decoder{cfg: cfg, source: source, separator: sep}, nil
}

// envelope is the change event's payload. Row images stay raw until the op says which one is
// read; json.Number keeps a bigint id and the LSN exact.
type envelope struct {
	Op     string          `json:"op"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
	Source struct {
		Table string      `json:"table"`
		LSN   json.Number `json:"lsn"`
	} `json:"source"`
}

// Skip reasons, as the run summary counts them.
const (
	SkipTombstone = "debezium tombstone"
	SkipMessage   = "debezium logical message"
)

// Decode turns one record value into a document (c, r, u), a deletion record (d), or a skip
// reason (the tombstone after a delete, a logical decoding message). The error of an event
// that is not a change of the configured columns names the op and log position.
func (d *Decoder) Decode(value []byte) (schemas.Document, string, error) {
	value = bytes.TrimSpace(value)
	if len(value) == 0 || string(value) == "null" {
		return schemas.Document{}, SkipTombstone, nil
	}
	payload, err := unwrap(value)
	if err != nil {
		return schemas.Document{}, "", err
	}
	if payload == nil {
		return schemas.Document{}, SkipTombstone, nil
	}
	var e envelope
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&e); err != nil {
		return schemas.Document{}, "", fmt.Errorf("not a Debezium change event: %v", err)
	}
	at := func(err error) error {
		if e.Source.LSN != "" {
			return fmt.Errorf("op %q at lsn %s: %w", e.Op, e.Source.LSN, err)
		}
		return fmt.Errorf("op %q: %w", e.Op, err)
	}
	switch e.Op {
	case "c", "r", "u", "d":
	case "m":
		return schemas.Document{}, SkipMessage, nil
	case "t":
		return schemas.Document{}, "", at(errors.New("a TRUNCATE removes rows the event does not name: the documents of the table stay until a full reload (turn truncate.handling.mode off in the connector to leave these events out)"))
	case "":
		return schemas.Document{}, "", errors.New("not a Debezium change event: no op (is the connector's value.converter the JsonConverter?)")
	default:
		return schemas.Document{}, "", at(fmt.Errorf("unknown op %q", e.Op))
	}
	version := e.Source.LSN.String()
	if _, err := strconv.ParseUint(version, 10, 64); err != nil {
		return schemas.Document{}, "", at(fmt.Errorf("source.lsn %q is not a log position: the version of a change must order it (is this a PostgreSQL connector's event?)", version))
	}
	source := d.source
	if source == "" {
		source = e.Source.Table
		if source == "" {
			return schemas.Document{}, "", at(errors.New("the event names no source.table, and source.name is not set to prefix the ids"))
		}
	}
	image, which := e.After, "after"
	if e.Op == "d" {
		image, which = e.Before, "before"
	}
	row, err := columns(image)
	if err != nil {
		return schemas.Document{}, "", at(fmt.Errorf("%s: %v", which, err))
	}
	if row == nil {
		if e.Op == "d" {
			return schemas.Document{}, "", at(errors.New("the delete has no before image: the table's REPLICA IDENTITY is NOTHING (set it to DEFAULT or FULL)"))
		}
		return schemas.Document{}, "", at(errors.New("the change has no after image"))
	}
	id, err := d.id(row, which)
	if err != nil {
		return schemas.Document{}, "", at(err)
	}
	doc := schemas.Document{ID: source + ":" + id, Source: source, Version: version}
	if e.Op == "d" {
		doc.Deleted = true
		return doc, "", nil
	}
	if d.cfg.TitleColumn != "" {
		if doc.Title, _, err = text(row, d.cfg.TitleColumn); err != nil {
			return doc, "", at(err)
		}
	}
	parts := make([]string, 0, len(d.cfg.TextColumns))
	for _, col := range d.cfg.TextColumns {
		s, present, err := text(row, col)
		if err != nil {
			return doc, "", at(err)
		}
		if present {
			parts = append(parts, s)
		}
	}
	doc.Text = strings.Join(parts, d.separator)
	if strings.TrimSpace(doc.Text) == "" {
		// A row with no text is no document: its earlier version must not stay searchable.
		doc.Title, doc.Text, doc.Deleted = "", "", true
	}
	return doc, "", nil
}

// unwrap returns the envelope of a value with or without the JsonConverter's schema wrapper;
// nil for a null payload.
func unwrap(value []byte) (json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(value, &top); err != nil {
		return nil, fmt.Errorf("not a Debezium change event: %v", err)
	}
	p, wrapped := top["payload"]
	if _, hasSchema := top["schema"]; !wrapped || !hasSchema {
		// schemas.enable=false: the value is the envelope itself.
		return value, nil
	}
	if string(bytes.TrimSpace(p)) == "null" {
		return nil, nil
	}
	return p, nil
}

// columns decodes a row image; nil for a null one.
func columns(image json.RawMessage) (map[string]json.RawMessage, error) {
	image = bytes.TrimSpace(image)
	if len(image) == 0 || string(image) == "null" {
		return nil, nil
	}
	var row map[string]json.RawMessage
	if err := json.Unmarshal(image, &row); err != nil {
		return nil, fmt.Errorf("not a row: %v", err)
	}
	return row, nil
}

func (d *Decoder) id(row map[string]json.RawMessage, which string) (string, error) {
	col := d.cfg.IDColumn
	s, present, err := text(row, col)
	switch {
	case err != nil:
		return "", err
	case !present:
		return "", fmt.Errorf("id column %q is null in %s: it must be the table's primary key (a delete's before image has only that, unless REPLICA IDENTITY FULL)", col, which)
	case s == "":
		return "", fmt.Errorf("id column %q is empty", col)
	}
	return s, nil
}

// text is a column's value as text: a string as is, a number or boolean as written; present
// is false for null. Objects and arrays (a struct or array column) are not text.
func text(row map[string]json.RawMessage, col string) (s string, present bool, err error) {
	raw, ok := row[col]
	if !ok {
		return "", false, fmt.Errorf("the row has no column %q (columns: %s)", col, strings.Join(slices.Sorted(maps.Keys(row)), ", "))
	}
	raw = bytes.TrimSpace(raw)
	switch {
	case string(raw) == "null":
		return "", false, nil
	case len(raw) > 0 && raw[0] == '"':
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false, fmt.Errorf("column %q: %v", col, err)
		}
		if s == Unavailable {
			return "", false, fmt.Errorf("column %q was not sent (an unchanged TOASTed value): set REPLICA IDENTITY FULL on the table so that every change carries the whole row", col)
		}
		return s, true, nil
	case len(raw) > 0 && (raw[0] == '{' || raw[0] == '['):
		return "", false, fmt.Errorf("column %q is not text, a number or a boolean", col)
	}
	// A number or true/false, as the converter wrote it.
	return string(raw), true, nil
}
