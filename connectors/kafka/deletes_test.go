package kafka

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/schemas"
)

// A raw record without a value is what its format says: in reignpipe's formats the deletion of
// the document its key names, version and source from the headers (the source from the id's
// prefix when absent); in a format whose tombstones are no documents, a counted skip.
func TestRawNullValue(t *testing.T) {
	hs := func(kv ...string) []kafkago.Header {
		var out []kafkago.Header
		for i := 0; i < len(kv); i += 2 {
			out = append(out, header(kv[i], kv[i+1]))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		format  RawFormat
		key     string
		value   []byte
		headers []kafkago.Header
		want    schemas.Document
		skip    string
		bad     string // part of the dead letter's reason
	}{
		{name: "versioned", key: "t:1", headers: hs(HeaderDocVersion, "42", HeaderDocSource, "feed"),
			want: schemas.Document{ID: "t:1", Source: "feed", Version: "42", Deleted: true}},
		{name: "source from the id", key: "enwiki:12", headers: hs(HeaderDocVersion, "7"),
			want: schemas.Document{ID: "enwiki:12", Source: "enwiki", Version: "7", Deleted: true}},
		{name: "no headers: whatever is stored", key: "plain",
			want: schemas.Document{ID: "plain", Source: "plain", Deleted: true}},
		{name: "empty value reads as null", key: "t:2", value: []byte{}, headers: hs(HeaderDocVersion, "3"),
			want: schemas.Document{ID: "t:2", Source: "t", Version: "3", Deleted: true}},
		{name: "no key", bad: "deletion of the document its key names"},
		{name: "key with a line break", key: "a\nb", bad: "control characters"},
		{name: "version not UTF-8", key: "t:3", headers: hs(HeaderDocVersion, "\xff"), bad: "not UTF-8"},
		{name: "skipping format", format: RawFormat{Null: NullSkips("tombstone")}, key: "t:1", skip: "tombstone"},
		{name: "a value is decoded", key: "t:4", value: []byte(`{"id":"t:4","text":"x"}`),
			want: schemas.Document{ID: "t:4", Text: "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewDocSource(nil, tc.format)
			d := kafkaclient.Delivery{Topic: "p.raw", Partition: 1, Offset: 9, Key: tc.key, Value: tc.value, Headers: tc.headers}
			doc, skip, err := s.format.read(d)
			if skip != tc.skip {
				t.Fatalf("skip %q, want %q", skip, tc.skip)
			}
			if skip != "" {
				return
			}
			doc, _, err = s.document(d, doc, err)
			var bad *connectors.BadInputError
			if tc.bad != "" {
				if !errors.As(err, &bad) || !strings.Contains(bad.Reason.Error(), tc.bad) || bad.Position != "p.raw/1@9" {
					t.Fatalf("%v, want a bad input at p.raw/1@9 saying %q", err, tc.bad)
				}
				return
			}
			tc.want.Position = "p.raw/1@9"
			if err != nil || !reflect.DeepEqual(doc, tc.want) {
				t.Fatalf("%+v %v, want %+v", doc, err, tc.want)
			}
		})
	}
}

// A deletion written as a tombstone reads back as the same deletion, whatever its strings.
func FuzzTombstone(f *testing.F) {
	f.Add("t:1", "42", "feed")
	f.Add("enwiki:12", "", "")
	f.Add("", "1", "x")
	f.Add("a\x00b", "\xff", "s")
	f.Fuzz(func(t *testing.T, id, version, source string) {
		in := schemas.Deletion{DocID: id, Version: version, Source: source}
		m := Tombstone(schemas.SchemaChunkDoc, in)
		if m.Value != nil || m.Key != id {
			t.Fatalf("tombstone %+v", m)
		}
		got, err := DeletionOf(m.Key, m.Headers)
		if err != nil {
			if schemas.CheckID(id) == nil && utf8Valid(version, source) {
				t.Fatalf("%+v refused: %v", in, err)
			}
			return
		}
		if in.Source == "" {
			in.Source, _, _ = strings.Cut(id, ":")
		}
		if got != in {
			t.Fatalf("read %+v, wrote %+v", got, in)
		}
		c, err := readChunks(kafkaclient.Delivery{Key: m.Key, Headers: append(m.Headers, header(HeaderSpace, "gn:fp"))})
		if err != nil || !c.Deleted || c.DocID != in.DocID || c.Version != in.Version || c.Source != in.Source || c.Fingerprint != "fp" {
			t.Fatalf("chunk record %+v %v of %+v", c, err, in)
		}
	})
}

func utf8Valid(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

func testProducer(t *testing.T, brokers, topic string, noFragment bool) *kafkaclient.Producer {
	t.Helper()
	p, err := kafkaclient.NewProducer(kafkaclient.ClientConfig{Brokers: strings.Split(brokers, ",")},
		kafkaclient.ProducerOptions{Topic: topic, NoFragment: noFragment})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testConsumer(t *testing.T, brokers, topic string) *kafkaclient.Consumer {
	t.Helper()
	c, err := kafkaclient.NewConsumer(kafkaclient.ClientConfig{Brokers: strings.Split(brokers, ",")},
		kafkaclient.ConsumerOptions{Group: kafkatest.Topic(t, "g"), Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// Deletions pass through the raw and chunk topics on the real broker: what RawSink and
// ChunkSink write, DocSource and ChunkSource read back as the same deletions, among upserts.
func TestDeletionsThroughRawAndChunkTopics(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	raw := kafkatest.Topic(t, "raw")
	kafkatest.CreateTopic(t, raw, 3)
	docs := []schemas.Document{
		{ID: "t:1", Source: "t", Version: "1", Text: "one"},
		{ID: "t:1", Source: "t", Version: "2", Deleted: true},
		{ID: "t:2", Source: "feed", Deleted: true},
		{ID: "t:3", Version: "5", Title: "three", Text: "three"},
	}
	rs := NewRawSink(testProducer(t, brokers, raw, false))
	for _, d := range docs {
		if err := rs.WriteDocument(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := rs.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rs.Close(ctx)
	src := NewDocSource(testConsumer(t, brokers, raw), RawFormat{})
	var got []schemas.Document
	for range docs {
		d, ack, err := src.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ack(ctx, nil)
		d.Position = ""
		got = append(got, d)
	}
	sortDocs(got)
	if !reflect.DeepEqual(got, docs) {
		t.Fatalf("raw topic read back\n%+v\nwritten\n%+v", got, docs)
	}

	chunks := kafkatest.Topic(t, "chunks")
	kafkatest.CreateTopic(t, chunks, 3)
	cs := NewChunkSink(testProducer(t, brokers, chunks, false))
	up := schemas.ChunkDoc{DocID: "t:1", Source: "t", Version: "1", ContentHash: 9, NTokens: 3, Fingerprint: "fp", K: 8, S: 8, Dim: 2,
		Keys: []uint64{5}, Embeddings: []float32{1, 0}}
	del := schemas.ChunkDoc{DocID: "t:1", Source: "t", Version: "2", Fingerprint: "fp", K: 8, S: 8, Dim: 2, Deleted: true}
	for _, c := range []schemas.ChunkDoc{up, del} {
		if err := cs.WriteChunks(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cs.Close(ctx)
	in := NewChunkSource(testConsumer(t, brokers, chunks))
	// One key, one partition: in the order written. K, S and the dimension are not carried.
	del.K, del.S, del.Dim = 0, 0, 0
	for _, want := range []schemas.ChunkDoc{up, del} {
		c, ack, err := in.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ack(ctx, nil)
		if !reflect.DeepEqual(c, want) {
			t.Fatalf("chunk topic read %+v, written %+v", c, want)
		}
	}
}

func sortDocs(ds []schemas.Document) {
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].ID < ds[j].ID })
}

// TestVectorDeletesLeaveTheLiveSet: vectors and deletions in every format on the real broker,
// read by kafka-python as compaction leaves the topic (last record per key, tombstones
// dropped: ops/oracles/kafka_live_set.py), hold exactly the documents still live, each at its
// last version. The tombstones are true nulls (an empty value would survive compaction).
func TestVectorDeletesLeaveTheLiveSet(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	vs := formatVectors(10, 16)
	for _, format := range VectorFormats {
		t.Run(format, func(t *testing.T) {
			topic := kafkatest.Topic(t, "live-"+format)
			kafkatest.CreateTopic(t, topic, 3)
			s, err := NewVectorSinkFormat(testProducer(t, brokers, topic, format != FormatRPDV), format)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			ctx := context.Background()
			for _, v := range vs {
				if err := s.Write(ctx, v); err != nil {
					t.Fatal(err)
				}
			}
			// t:0..t:3 deleted (t:2 with no version); t:1 comes back at a newer version; a
			// document never written is deleted too.
			back := vs[1]
			back.Version = "900"
			for _, op := range []func() error{
				func() error {
					return s.Delete(ctx, schemas.Deletion{DocID: "t:0", Source: "t", Version: vs[0].Version})
				},
				func() error {
					return s.Delete(ctx, schemas.Deletion{DocID: "t:1", Source: "t", Version: vs[1].Version})
				},
				func() error { return s.Delete(ctx, schemas.Deletion{DocID: "t:2"}) },
				func() error { return s.Delete(ctx, schemas.Deletion{DocID: "t:3", Version: "999"}) },
				func() error { return s.Write(ctx, back) },
				func() error { return s.Delete(ctx, schemas.Deletion{DocID: "t:never", Version: "1"}) },
			} {
				if err := op(); err != nil {
					t.Fatal(err)
				}
			}
			// The summary's per-sink counts are of what the broker acknowledged only.
			if c := s.Counts(); c["written"] != 0 || c["deleted"] != 0 {
				t.Fatalf("counts before Flush: %v, want zeros", c)
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if c := s.Counts(); c["written"] != int64(len(vs)+1) || c["deleted"] != 5 {
				t.Fatalf("counts after Flush: %v, want %d written, 5 deleted", c, len(vs)+1)
			}
			want := map[string]kafkatest.Live{}
			for _, v := range append(vs[4:], back) {
				want[v.DocID] = kafkatest.Live{Version: v.Version, ContentHash: v.ContentHash, Space: v.Space}
			}
			got := kafkatest.LiveSet(t, brokers, topic, format)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("kafka-python sees live %v, want %v", got, want)
			}
		})
	}
}
