package kafka

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/schemas"
)

// formatVectors are vectors worth checking a reader against: components that are hard to write
// exactly (negative zero, subnormals, the extremes, the one float32 whose shortest form reads
// back wrong through float64), titles that need escaping, with and without the GN companion.
func formatVectors(n, dim int) []schemas.DocVector {
	r := rand.New(rand.NewPCG(7, 11))
	hard := []float32{float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.MaxFloat32, math.MaxFloat32,
		math.Float32frombits(363742205), -math.Float32frombits(363742205), 0.1, 1.0 / 3, 16777217, 1e-7}
	titles := []string{"plain", `quote " backslash \ slash /`, "line\nbreak\ttab", "café ☕ \u2028 <&>", ""}
	var out []schemas.DocVector
	for i := range n {
		vec := make([]float32, dim)
		for j := range vec {
			vec[j] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(12)-6)))
		}
		copy(vec, hard[i%len(hard):])
		v := schemas.DocVector{DocID: fmt.Sprintf("t:%d", i), Title: titles[i%len(titles)], Source: "t", Version: fmt.Sprint(100 + i),
			ContentHash: r.Uint64(), NChunks: 1 + i, NTokens: 37 * (i + 1), Space: "gn-meanpool:fp", Vector: vec}
		if i%2 == 1 {
			v.Space, v.GNSpace = "reign:ck", "gn-meanpool:fp"
			v.GNVector = append([]float32(nil), vec[:dim/2]...)
			v.GNVector[0] = math.Float32frombits(363742205)
		}
		out = append(out, v)
	}
	return out
}

// produceVectors writes vs through a VectorSink of the given format, as a kafka sink does.
func produceVectors(t *testing.T, brokers, topic, format string, maxRecord int, vs []schemas.DocVector) *VectorSink {
	t.Helper()
	p, err := kafkaclient.NewProducer(kafkaclient.ClientConfig{Brokers: strings.Split(brokers, ",")},
		kafkaclient.ProducerOptions{Topic: topic, MaxRecordBytes: maxRecord, NoFragment: format != FormatRPDV})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewVectorSinkFormat(p, format)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, v := range vs {
		if err := s.Write(ctx, v); err != nil {
			t.Fatalf("%s: %v", v.DocID, err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// readVector is a vector as another client read it.
type readVector struct {
	Key         string            `json:"key"`
	DocID       string            `json:"doc_id"`
	Title       string            `json:"title"`
	Source      string            `json:"source"`
	Version     string            `json:"version"`
	ContentHash uint64            `json:"content_hash"`
	NChunks     int               `json:"n_chunks"`
	NTokens     int               `json:"n_tokens"`
	Space       string            `json:"space"`
	Vector      []float32         `json:"vector"`
	GNSpace     string            `json:"gn_space"`
	GNVector    []float32         `json:"gn_vector"`
	Headers     map[string]string `json:"headers"`
}

const jsonConverter = "Kafka Connect JsonConverter"

// compareAll checks that got holds every written vector exactly once, every field and every
// component bit for bit (for JsonConverter, -0 may read as 0).
func compareAll(t *testing.T, reader string, want []schemas.DocVector, got []readVector) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s read %d records, %d were written", reader, len(got), len(want))
	}
	byID := map[string]schemas.DocVector{}
	for _, v := range want {
		byID[v.DocID] = v
	}
	for _, g := range got {
		w, ok := byID[g.DocID]
		if !ok {
			t.Fatalf("%s read %q, which was not written (or twice)", reader, g.DocID)
		}
		delete(byID, g.DocID)
		if g.Key != w.DocID || g.Title != w.Title || g.Source != w.Source || g.Version != w.Version || g.ContentHash != w.ContentHash ||
			g.NChunks != w.NChunks || g.NTokens != w.NTokens || g.Space != w.Space || g.GNSpace != w.GNSpace {
			t.Fatalf("%s read %+v\nwritten %+v", reader, g, w)
		}
		for name, pair := range map[string][2][]float32{"vector": {g.Vector, w.Vector}, "gn_vector": {g.GNVector, w.GNVector}} {
			if len(pair[0]) != len(pair[1]) {
				t.Fatalf("%s: %s %s has %d components, %d written", reader, w.DocID, name, len(pair[0]), len(pair[1]))
			}
			for i := range pair[1] {
				same := math.Float32bits(pair[0][i]) == math.Float32bits(pair[1][i])
				if !same && reader == jsonConverter && pair[0][i] == 0 && pair[1][i] == 0 {
					same = true // JsonConverter reads numbers as BigDecimal, which has no negative zero
				}
				if !same {
					t.Fatalf("%s: %s %s[%d] reads as %v, written %v", reader, w.DocID, name, i, pair[0][i], pair[1][i])
				}
			}
		}
	}
}

// kafkaPython reads the topic with kafka-python through ops/oracles/kafka_vectors.py, which
// decodes each format from schemas/WIRE.md alone and, for connect-json, checks the envelope
// field by field against what JsonConverter requires.
func kafkaPython(t *testing.T, brokers, topic, format string, n int) []readVector {
	t.Helper()
	py := testenv.Python(t, "kafka", "zstandard")
	cmd := exec.Command(py, filepath.Join(testenv.Root(), "ops", "oracles", "kafka_vectors.py"), brokers, topic, fmt.Sprint(n), "60", format)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kafka_vectors.py %s: %v\n%s", format, err, stderr.String())
	}
	var got []readVector
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r readVector
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("kafka_vectors.py line %q: %v", line, err)
		}
		got = append(got, r)
	}
	return got
}

// kcatRecords consumes the topic with kcat: key, headers and value of every record.
func kcatRecords(t *testing.T, brokers, topic string, n int) (keys, headers, values []string) {
	t.Helper()
	kcat := testenv.Tool(t, "kcat", "kafkacat")
	// \x1e between fields: a JSON value holds no raw control characters, a key no \x1e.
	out, err := exec.Command(kcat, "-C", "-b", brokers, "-t", topic, "-e", "-q", "-c", fmt.Sprint(n), "-f", "%k\x1e%h\x1e%s\n").Output()
	if err != nil {
		t.Fatalf("kcat: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		f := strings.SplitN(line, "\x1e", 3)
		if len(f) != 3 {
			t.Fatalf("kcat line %q", line)
		}
		keys, headers, values = append(keys, f[0]), append(headers, f[1]), append(values, f[2])
	}
	return keys, headers, values
}

// jsonRecord is a json value, or a connect-json payload, as any JSON reader sees it.
type jsonRecord struct {
	DocID       string     `json:"doc_id"`
	Title       string     `json:"title"`
	Source      string     `json:"source"`
	Version     string     `json:"version"`
	ContentHash string     `json:"content_hash"`
	NChunks     int        `json:"n_chunks"`
	NTokens     int        `json:"n_tokens"`
	Space       string     `json:"space"`
	Vector      []float32  `json:"vector"`
	GNSpace     *string    `json:"gn_space"`
	GNVector    *[]float32 `json:"gn_vector"`
}

func (j jsonRecord) read(t *testing.T, key string) readVector {
	t.Helper()
	var h uint64
	if _, err := fmt.Sscanf(j.ContentHash, "%016x", &h); err != nil || len(j.ContentHash) != 16 {
		t.Fatalf("content_hash %q is not 16 hex digits", j.ContentHash)
	}
	r := readVector{Key: key, DocID: j.DocID, Title: j.Title, Source: j.Source, Version: j.Version, ContentHash: h,
		NChunks: j.NChunks, NTokens: j.NTokens, Space: j.Space, Vector: j.Vector}
	if j.GNSpace != nil {
		r.GNSpace = *j.GNSpace
	}
	if j.GNVector != nil {
		r.GNVector = *j.GNVector
	}
	return r
}

// TestVectorFormatsReadByOtherClients writes vectors in every format through the real sink to
// the real broker, then reads them back with clients that are not reignpipe: kafka-python,
// kcat (and kcat | jq for the JSON formats), and for connect-json Kafka Connect's own
// JsonConverter. Every field and every vector component must come back as written.
func TestVectorFormatsReadByOtherClients(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	want := formatVectors(24, 96)
	schemaOf := map[string]string{FormatRPDV: schemas.SchemaDocVector, FormatJSON: schemas.SchemaDocVectorJSON,
		FormatConnectJSON: schemas.SchemaDocVectorConnectJSON}
	for _, format := range VectorFormats {
		t.Run(format, func(t *testing.T) {
			topic := kafkatest.Topic(t, "vectors-"+format)
			kafkatest.CreateTopic(t, topic, 3)
			s := produceVectors(t, brokers, topic, format, 0, want)
			if st := s.p.Stats(); st.Fragments != 0 || st.Messages != int64(len(want)) {
				t.Fatalf("producer stats %+v", st)
			}

			got := kafkaPython(t, brokers, topic, format, len(want))
			compareAll(t, "kafka-python", want, got)
			for _, g := range got {
				if g.Headers[schemas.HeaderSchema] != schemaOf[format] || g.Headers[HeaderDocVersion] != g.Version || g.Headers[HeaderSpace] != g.Space {
					t.Fatalf("headers %v of %s", g.Headers, g.DocID)
				}
			}
			if format == FormatRPDV {
				return // RPDV is binary: kcat and jq have nothing to read in it
			}

			keys, headers, values := kcatRecords(t, brokers, topic, len(want))
			var viaKcat []readVector
			for i, v := range values {
				var rec jsonRecord
				body := []byte(v)
				if format == FormatConnectJSON {
					var env struct{ Schema, Payload json.RawMessage }
					if err := json.Unmarshal(body, &env); err != nil || !bytes.Equal(env.Schema, schemas.ConnectSchema()) {
						t.Fatalf("kcat value %d is not the connect-json envelope: %v\n%s", i, err, v)
					}
					body = env.Payload
				}
				if err := json.Unmarshal(body, &rec); err != nil {
					t.Fatalf("kcat value %q: %v", v, err)
				}
				if !strings.Contains(headers[i], schemas.HeaderSchema+"="+schemaOf[format]) {
					t.Fatalf("kcat headers %q", headers[i])
				}
				viaKcat = append(viaKcat, rec.read(t, keys[i]))
			}
			compareAll(t, "kcat", want, viaKcat)
			checkJQ(t, format, values, want)
			if format == FormatConnectJSON {
				checkJsonConverter(t, brokers, topic, want)
			}
		})
	}
}

// checkJQ runs the recipe ops/DISTRIBUTED.md gives, kcat ... | jq, over the values kcat read.
func checkJQ(t *testing.T, format string, values []string, want []schemas.DocVector) {
	t.Helper()
	jq := testenv.Tool(t, "jq")
	filter := `{doc_id, version, space, dim: (.vector | length), gn_dim: ((.gn_vector // []) | length)}`
	if format == FormatConnectJSON {
		filter = ".payload | " + filter
	}
	cmd := exec.Command(jq, "-c", filter)
	cmd.Stdin = strings.NewReader(strings.Join(values, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("jq: %v", err)
	}
	byID := map[string]schemas.DocVector{}
	for _, v := range want {
		byID[v.DocID] = v
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		var r struct {
			DocID   string `json:"doc_id"`
			Version string `json:"version"`
			Space   string `json:"space"`
			Dim     int    `json:"dim"`
			GNDim   int    `json:"gn_dim"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("jq line %q: %v", line, err)
		}
		w := byID[r.DocID]
		if r.Version != w.Version || r.Space != w.Space || r.Dim != len(w.Vector) || r.GNDim != len(w.GNVector) {
			t.Fatalf("jq read %s, written %+v", line, w)
		}
	}
	if len(lines) != len(want) {
		t.Fatalf("jq printed %d lines for %d records", len(lines), len(want))
	}
}

// checkJsonConverter reads the topic with Kafka Connect's JsonConverter (schemas.enable=true)
// and StringConverter for keys, the classes a Connect worker runs (ops/oracles/
// ConnectJsonCheck.java, on the connect-json jar that ops/kafka fetch brings).
func checkJsonConverter(t *testing.T, brokers, topic string, want []schemas.DocVector) {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(testenv.Home(), "kafka", "*", "connect-libs", "connect-json-*.jar"))
	if len(matches) == 0 {
		testenv.Missing(t, "Kafka Connect's connect-json jar is not under %s/kafka/*/connect-libs: run ops/kafka fetch (make test does)", testenv.Home())
		return
	}
	java, err := exec.LookPath("java")
	if err != nil {
		testenv.Missing(t, "java not found: the JsonConverter check runs Kafka's own converter")
		return
	}
	cmd := exec.Command(java, "-cp", filepath.Join(filepath.Dir(matches[len(matches)-1]), "*"),
		filepath.Join(testenv.Root(), "ops", "oracles", "ConnectJsonCheck.java"), brokers, topic, fmt.Sprint(len(want)), "90")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("JsonConverter check: %v\n%s", err, stderr.String())
	}
	wantTypes := map[string]string{"doc_id": "STRING", "title": "STRING", "source": "STRING", "version": "STRING",
		"content_hash": "STRING", "n_chunks": "INT64", "n_tokens": "INT64", "space": "STRING",
		"vector": "ARRAY<FLOAT32>", "gn_space": "STRING?", "gn_vector": "ARRAY<FLOAT32>?"}
	var got []readVector
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Key          string            `json:"key"`
			SchemaName   string            `json:"schema_name"`
			FieldTypes   map[string]string `json:"field_types"`
			DocID        string            `json:"doc_id"`
			Title        string            `json:"title"`
			Source       string            `json:"source"`
			Version      string            `json:"version"`
			ContentHash  string            `json:"content_hash"`
			Space        string            `json:"space"`
			GNSpace      *string           `json:"gn_space"`
			NChunks      int               `json:"n_chunks"`
			NTokens      int               `json:"n_tokens"`
			VectorBits   []int32           `json:"vector_bits"` // Java's int: the sign bit reads negative
			GNVectorBits []int32           `json:"gn_vector_bits"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("JsonConverter check line %q: %v", line, err)
		}
		if r.SchemaName != schemas.ConnectSchemaName || !reflect.DeepEqual(r.FieldTypes, wantTypes) {
			t.Fatalf("JsonConverter made schema %s %v of it, want %v", r.SchemaName, r.FieldTypes, wantTypes)
		}
		rec := jsonRecord{DocID: r.DocID, Title: r.Title, Source: r.Source, Version: r.Version, ContentHash: r.ContentHash,
			NChunks: r.NChunks, NTokens: r.NTokens, Space: r.Space, GNSpace: r.GNSpace}
		for _, b := range r.VectorBits {
			rec.Vector = append(rec.Vector, math.Float32frombits(uint32(b)))
		}
		if r.GNVectorBits != nil {
			gv := []float32{}
			for _, b := range r.GNVectorBits {
				gv = append(gv, math.Float32frombits(uint32(b)))
			}
			rec.GNVector = &gv
		}
		got = append(got, rec.read(t, r.Key))
	}
	compareAll(t, jsonConverter, want, got)
}

// A JSON vector too large for one record is refused whole, with its size and the limit in the
// reason, as a bad input the stage dead-letters; the sink takes the next vector as usual.
func TestJSONVectorOverLimitIsRefused(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	for _, format := range []string{FormatJSON, FormatConnectJSON} {
		t.Run(format, func(t *testing.T) {
			topic := kafkatest.Topic(t, "oversize-"+format)
			kafkatest.CreateTopic(t, topic, 1)
			vs := formatVectors(2, 8)
			big := vs[0]
			big.Title = strings.Repeat("x", 70_000)
			s := produceVectors(t, brokers, topic, format, 64<<10, nil)
			ctx := context.Background()
			err := s.Write(ctx, big)
			var bad *connectors.BadInputError
			if !errors.As(err, &bad) || bad.DocID != big.DocID {
				t.Fatalf("oversize vector: %v, want a bad input naming %s", err, big.DocID)
			}
			want := fmt.Sprintf("exceeds transport.kafka.max_record_bytes=65536; format %s is never fragmented", format)
			if !strings.HasPrefix(bad.Reason.Error(), "vector record of ") || !strings.Contains(bad.Reason.Error(), want) {
				t.Fatalf("reason %q", bad.Reason)
			}
			if err := s.Write(ctx, vs[1]); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			keys, _, _ := kcatRecords(t, brokers, topic, 1)
			if st := s.p.Stats(); len(keys) != 1 || keys[0] != vs[1].DocID || st.Messages != 1 || st.Fragments != 0 {
				t.Fatalf("topic holds %v, producer stats %+v", keys, st)
			}
		})
	}
}

// A JSON format needs a producer that never fragments; an unknown format is refused.
func TestNewVectorSinkFormat(t *testing.T) {
	p, err := kafkaclient.NewProducer(kafkaclient.ClientConfig{Brokers: []string{"127.0.0.1:9"}}, kafkaclient.ProducerOptions{Topic: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if _, err := NewVectorSinkFormat(p, FormatJSON); err == nil || !strings.Contains(err.Error(), "never fragments") {
		t.Fatalf("json on a fragmenting producer: %v", err)
	}
	if _, err := NewVectorSinkFormat(p, "avro"); err == nil {
		t.Fatal("unknown format accepted")
	}
	if s, err := NewVectorSinkFormat(p, ""); err != nil || s.Format() != FormatRPDV {
		t.Fatalf("empty format: %v %v", s, err)
	}
}
