package jsonl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/reignpipe/reignpipe/schemas"
)

// Record is one parsed line. Deleted marks a deletion line: {"id": "...", "deleted": true,
// "version": "..."} says the document is gone as of that version (schemas.Deletion's rule;
// without a version, whatever version is stored goes and the deletion is not remembered).
// Its text must be absent or empty, since a line with text would be both an upsert and a
// deletion; a title is ignored.
type Record struct {
	ID, Title, Text, Version string
	Deleted                  bool
}

type rawRecord struct {
	ID      json.RawMessage `json:"id"`
	UID     json.RawMessage `json:"_id"`
	Title   json.RawMessage `json:"title"`
	Text    json.RawMessage `json:"text"`
	Version json.RawMessage `json:"version"`
	Deleted json.RawMessage `json:"deleted"`
}

// ParseLine parses one JSONL line. On error the returned Record holds the ID when it was
// readable, so the dead letter can name the document.
func ParseLine(line []byte) (Record, error) {
	var rec Record
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return rec, errors.New("line is not a JSON object")
	}
	var raw rawRecord
	if err := json.Unmarshal(line, &raw); err != nil {
		return rec, fmt.Errorf("invalid JSON: %w", err)
	}
	idRaw := raw.ID
	if isAbsent(idRaw) {
		idRaw = raw.UID
	}
	if isAbsent(idRaw) {
		return rec, errors.New(`missing "id" (or "_id")`)
	}
	id, err := scalar(idRaw)
	if err != nil {
		return rec, fmt.Errorf("id: %w", err)
	}
	if err := schemas.CheckID(id); err != nil {
		return rec, err
	}
	rec.ID = id
	if !isAbsent(raw.Version) {
		if rec.Version, err = scalar(raw.Version); err != nil {
			return rec, fmt.Errorf("version: %w", err)
		}
	}
	if !isAbsent(raw.Deleted) {
		if err := json.Unmarshal(raw.Deleted, &rec.Deleted); err != nil {
			return rec, errors.New(`"deleted" is not true or false`)
		}
	}
	if rec.Deleted {
		if !isAbsent(raw.Text) {
			if text, err := str(raw.Text); err != nil || text != "" {
				return rec, errors.New(`a deletion line ("deleted": true) has text; leave "text" out, or drop "deleted" to embed it`)
			}
		}
		return rec, nil
	}
	if isAbsent(raw.Text) {
		return rec, errors.New(`missing "text"`)
	}
	if rec.Text, err = str(raw.Text); err != nil {
		return rec, fmt.Errorf("text: %w", err)
	}
	if !isAbsent(raw.Title) {
		if rec.Title, err = str(raw.Title); err != nil {
			return rec, fmt.Errorf("title: %w", err)
		}
	}
	return rec, nil
}

func isAbsent(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }

// str decodes a JSON string. encoding/json turns invalid UTF-8 into U+FFFD already.
func str(m json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(m, &s); err != nil {
		return "", errors.New("not a string")
	}
	return s, nil
}

// scalar accepts a string or a number, keeping the number as written ("007" stays a string,
// 7 becomes "7", 1e3 stays "1e3").
func scalar(m json.RawMessage) (string, error) {
	if len(m) > 0 && m[0] == '"' {
		return str(m)
	}
	var n json.Number
	if err := json.Unmarshal(m, &n); err != nil {
		return "", errors.New("not a string or number")
	}
	if !utf8.ValidString(string(n)) {
		return "", errors.New("not a string or number")
	}
	return string(n), nil
}
