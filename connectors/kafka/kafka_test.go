package kafka

import (
	"testing"

	"github.com/reignpipe/reignpipe/internal/kafkaclient"
)

// Raw documents from Kafka, whoever produced them, get the text policy of the file sources,
// counted in the source's stats. (Invalid UTF-8 stays a dead letter: the wire format requires
// UTF-8, schemas/WIRE.md.)
func TestDocSourceTextPolicy(t *testing.T) {
	s := NewDocSource(nil, RawFormat{})
	value := []byte("{\"id\":\"t:1\",\"source\":\"t\",\"title\":\"A\\u0000B\",\"text\":\"caf\\u00e9 \\u0001ok\"}")
	doc, skip, err := s.format.Decode(value)
	if err != nil || skip != "" {
		t.Fatalf("decode: %v %q", err, skip)
	}
	doc, _, err = s.document(kafkaclient.Delivery{Topic: "p.raw", Key: "t:1", Value: value}, doc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Title != "AB" || doc.Text != "café ok" {
		t.Fatalf("title %q text %q", doc.Title, doc.Text)
	}
	if st := s.Stats().Text; st["stripped_control"] != 2 {
		t.Fatalf("text counts %v", st)
	}
}
