package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors/kafka"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/kafkaclient"
	"github.com/reignpipe/reignpipe/internal/kafkatest"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/schemas"
)

// The tests here run distributed mode for real: the reignpipe binary as separate stage
// processes, joined by topics on the test broker (ops/kafka), with the real GN on ONNX Runtime.

// stageCorpus writes n documents of one to four windows (K=64) and one broken line.
func stageCorpus(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	words := strings.Fields("patent claims describe a method for embedding long documents where each window " +
		"of tokens is encoded once by the guidance network and the sequence of chunk vectors becomes one vector")
	var b strings.Builder
	var ids []string
	for i := 0; i < n; i++ {
		var text []string
		for j := 0; j < 20+(i*37)%180; j++ {
			text = append(text, words[(i*7+j*3)%len(words)])
		}
		id := fmt.Sprintf("d%03d", i)
		ids = append(ids, "t:"+id)
		line, _ := json.Marshal(map[string]string{"id": id, "title": "doc " + id, "text": strings.Join(text, " ")})
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteString(`{"id": "broken", "text": ` + "\n")
	path := filepath.Join(dir, "corpus.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, ids
}

// stageSetup builds the binary and writes a pipeline file for the given transport.
type stageSetup struct {
	bin, dir, brokers, topics string
	model, tok                string
}

func newStageSetup(t *testing.T) *stageSetup {
	t.Helper()
	brokers := kafkatest.Brokers(t)
	model, tok := testenv.GN(t, "bge-small-en-v15")
	t.Setenv("REIGNPIPE_ORT_LIB", testenv.ORTLibrary(t))
	s := &stageSetup{dir: t.TempDir(), brokers: brokers, topics: kafkatest.Topic(t, "stage"), model: model, tok: tok}
	s.bin = filepath.Join(s.dir, "reignpipe")
	out, err := exec.Command("go", "build", "-o", s.bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("building reignpipe: %v\n%s", err, out)
	}
	return s
}

func (s *stageSetup) config(t *testing.T, name, input, transport, sinks string) string {
	t.Helper()
	y := fmt.Sprintf(`version: 1
name: %s
source: {type: jsonl, path: %q, name: t}
gn: {name: bge-small-en-v15, model: %q, tokenizer: %q}
chunking: {k: 64, s: 64}
batching: {max_wait: 5ms, token_budget: 2048}
cache: {dir: %q}
sinks:
%s
dead_letter: {path: %q}
run: {state_dir: %q, progress: log, commit_every: 8, commit_interval: 1s}
transport:
  type: %s
  kafka: {brokers: [%q], topics: %q, partitions: 3, max_record_bytes: 262144}
`, name, input, s.model, s.tok, filepath.Join(s.dir, name+"-cache"), sinks, filepath.Join(s.dir, name+"-dl.jsonl"),
		filepath.Join(s.dir, name+"-state"), transport, s.brokers, s.topics)
	if _, err := pipelines.Parse([]byte(y)); err != nil {
		t.Fatalf("pipeline file: %v\n%s", err, y)
	}
	path := filepath.Join(s.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// start runs one stage process; its output goes to a log file shown when the test fails.
func (s *stageSetup) start(t *testing.T, label string, args ...string) *exec.Cmd {
	t.Helper()
	logPath := filepath.Join(s.dir, label+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.bin, append([]string{"stage"}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			if t.Failed() {
				// A stuck stage: SIGQUIT makes the Go runtime print every goroutine into the log.
				_ = cmd.Process.Signal(syscall.SIGQUIT)
				time.Sleep(time.Second)
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("--- %s log (tail) ---\n%s", label, tail(string(b), 40000))
		}
	})
	return cmd
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// stop ends a stage with SIGTERM (drain, commit, exit) and wants a clean exit, with a summary
// that says the stage stopped: a signal is how a stage normally ends (exit 0), unlike a run,
// which it interrupts.
func stop(t *testing.T, label string, cmd *exec.Cmd) {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s: exit after SIGTERM: %v", label, err)
		}
		if f, ok := cmd.Stdout.(*os.File); ok {
			b, _ := os.ReadFile(f.Name())
			if i := bytes.LastIndex(b, []byte(`"stopped": `)); i < 0 || !bytes.HasPrefix(b[i:], []byte(`"stopped": "stopped"`)) {
				t.Errorf("%s: the summary after SIGTERM does not say stopped: stopped:\n%s", label, tail(string(b), 2000))
			}
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Errorf("%s: still running 60s after SIGTERM", label)
	}
}

// readTopic consumes a topic with a fresh group until want documents are seen (or timeout),
// decoding every record as a document vector. It returns the newest vector per key and the
// number of records read (duplicates included).
func readVectors(t *testing.T, brokers, topic string, want []string, timeout time.Duration, during func(seen int)) (map[string]schemas.DocVector, int) {
	t.Helper()
	c, err := kafkaclient.NewConsumer(kafkaclient.ClientConfig{Brokers: []string{brokers}}, kafkaclient.ConsumerOptions{Group: kafkatest.Topic(t, "reader"), Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got, read := map[string]schemas.DocVector{}, 0
	missing := func() []string {
		var m []string
		for _, id := range want {
			if _, ok := got[id]; !ok {
				m = append(m, id)
			}
		}
		return m
	}
	for len(missing()) > 0 {
		d, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("reading %s: %v; %d of %d documents arrived, missing %v", topic, err, len(want)-len(missing()), len(want), missing())
		}
		v, err := schemas.DecodeDocVector(d.Value)
		if err != nil {
			t.Fatalf("record %s at %s: %v", d.Key, kafka.Position(d), err)
		}
		if v.DocID != d.Key || kafka.HeaderValue(d.Headers, schemas.HeaderSchema) != schemas.SchemaDocVector {
			t.Fatalf("record key %q / schema header %q for document %q", d.Key, kafka.HeaderValue(d.Headers, schemas.HeaderSchema), v.DocID)
		}
		got[v.DocID] = v
		read++
		if during != nil {
			during(len(got))
		}
	}
	return got, read
}

func embeddedVectors(t *testing.T, s *stageSetup, input string) map[string]schemas.DocVector {
	t.Helper()
	cfg, err := pipelines.Load(s.config(t, "embedded", input, "embedded", fmt.Sprintf("  - {type: parquet, dir: %q}", filepath.Join(s.dir, "embedded-vectors"))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(context.Background(), cfg, false); err != nil {
		t.Fatal(err)
	}
	vs, err := vectorfile.Latest(filepath.Join(s.dir, "embedded-vectors"))
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func assertSameVectors(t *testing.T, want, got map[string]schemas.DocVector) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("distributed run has %d documents, embedded %d", len(got), len(want))
	}
	worst := 0.0
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("%s missing from the distributed output", id)
			continue
		}
		if g.ContentHash != w.ContentHash || g.NChunks != w.NChunks || g.NTokens != w.NTokens || g.Space != w.Space || len(g.Vector) != len(w.Vector) {
			t.Errorf("%s: distributed %+v vs embedded %+v", id, g, w)
			continue
		}
		for i := range w.Vector {
			worst = math.Max(worst, math.Abs(float64(g.Vector[i]-w.Vector[i])))
		}
	}
	t.Logf("max |distributed - embedded| over %d documents: %.3g", len(want), worst)
	if worst > 1e-6 {
		t.Errorf("vectors differ by up to %g (> 1e-6)", worst)
	}
}

// TestStagesMatchEmbedded: ingest, embed and aggregate as three processes give the embedded
// run's vectors; the broken input lands on the dead-letter topic; SIGTERM ends every stage
// cleanly.
func TestStagesMatchEmbedded(t *testing.T) {
	s := newStageSetup(t)
	input, ids := stageCorpus(t, s.dir, 24)
	want := embeddedVectors(t, s, input)

	cfg := s.config(t, "dist", input, "kafka", "  - {type: kafka}")
	ingest := s.start(t, "ingest", "ingest", "--idle-exit", "3s", cfg)
	embed := s.start(t, "embed", "embed", cfg)
	agg := s.start(t, "aggregate", "aggregate", cfg)
	// Ingest exits when the corpus is published; by then every topic exists.
	if err := ingest.Wait(); err != nil {
		t.Fatalf("ingest: %v", err)
	}
	got, _ := readVectors(t, s.brokers, s.topics+".vectors", ids, 2*time.Minute, nil)
	stop(t, "embed", embed)
	stop(t, "aggregate", agg)
	assertSameVectors(t, want, got)
	checkThirdPartyReaders(t, s, got)
}

// checkThirdPartyReaders reads the vector topic with clients we did not write: kcat lists the
// keys, and kafka-python decodes every value from the layout in schemas/WIRE.md alone.
func checkThirdPartyReaders(t *testing.T, s *stageSetup, got map[string]schemas.DocVector) {
	t.Helper()
	topic := s.topics + ".vectors"
	kcat := testenv.Tool(t, "kcat", "kafkacat")
	out, err := exec.Command(kcat, "-C", "-b", s.brokers, "-t", topic, "-e", "-q", "-f", "%k\n").Output()
	if err != nil {
		t.Fatalf("kcat: %v", err)
	}
	keys := map[string]bool{}
	for _, k := range strings.Fields(string(out)) {
		keys[k] = true
	}
	for id := range got {
		if !keys[id] {
			t.Errorf("kcat does not see key %s", id)
		}
	}
	py := testenv.Python(t, "kafka", "zstandard")
	cmd := exec.Command(py, filepath.Join(testenv.Root(), "ops", "oracles", "kafka_vectors.py"), s.brokers, topic, fmt.Sprint(len(got)), "60")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("kafka_vectors.py: %v\n%s", err, stderr.String())
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Doc    string    `json:"doc_id"`
			K      string    `json:"key"`
			Sp     string    `json:"space"`
			Hash   uint64    `json:"content_hash"`
			Vector []float32 `json:"vector"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("kafka_vectors.py line %q: %v", line, err)
		}
		g, ok := got[r.Doc]
		if !ok || r.K != r.Doc || r.Sp != g.Space || r.Hash != g.ContentHash || len(r.Vector) != len(g.Vector) {
			t.Fatalf("kafka-python read %s (key %s, space %s, hash %d, dim %d); reignpipe %+v", r.Doc, r.K, r.Sp, r.Hash, len(r.Vector), g)
		}
		for i := range g.Vector {
			if r.Vector[i] != g.Vector[i] {
				t.Fatalf("%s: kafka-python decodes component %d as %v, reignpipe as %v", r.Doc, i, r.Vector[i], g.Vector[i])
			}
		}
		n++
	}
	t.Logf("kcat saw %d keys; kafka-python decoded %d vectors identically", len(keys), n)
}

// TestStagesSurviveWorkerKillAndBrokerRestart: two embed workers share the raw topic; one is
// killed with SIGKILL mid-run and later the broker restarts. Every document still reaches the
// keyed output, with its embedded-run vector, and none that was not in the input.
func TestStagesSurviveWorkerKillAndBrokerRestart(t *testing.T) {
	s := newStageSetup(t)
	input, ids := stageCorpus(t, s.dir, 60)
	want := embeddedVectors(t, s, input)

	cfg := s.config(t, "dist", input, "kafka", "  - {type: kafka}")
	ingest := s.start(t, "ingest", "ingest", "--idle-exit", "3s", cfg)
	if err := ingest.Wait(); err != nil {
		t.Fatalf("ingest: %v", err)
	}
	embedA := s.start(t, "embed-a", "embed", "--cache-dir", filepath.Join(s.dir, "cache-a"), cfg)
	embedB := s.start(t, "embed-b", "embed", "--cache-dir", filepath.Join(s.dir, "cache-b"), cfg)
	agg := s.start(t, "aggregate", "aggregate", cfg)
	killed, restarted := false, false
	got, records := readVectors(t, s.brokers, s.topics+".vectors", ids, 6*time.Minute, func(seen int) {
		switch {
		case !killed && seen >= len(ids)/4:
			killed = true
			_ = embedA.Process.Kill()
			_ = embedA.Wait()
			t.Logf("killed embed worker A after %d documents", seen)
		case killed && !restarted && seen >= len(ids)/2:
			restarted = true
			kafkatest.Restart(t)
			t.Logf("restarted the broker after %d documents", seen)
		}
	})
	stop(t, "embed-b", embedB)
	stop(t, "aggregate", agg)
	if !killed || !restarted {
		t.Fatalf("the disruptions did not happen mid-run (killed %v, restarted %v)", killed, restarted)
	}
	t.Logf("%d vector records for %d documents (at-least-once duplicates: %d)", records, len(got), records-len(got))
	assertSameVectors(t, want, got)
}

// TestStagesHugeDocument: a document of 10^6 tokens passes ingest → embed → aggregate with the
// broker's default 1 MB record limit: its raw text (~5 MB) and chunk embeddings (~3 MB at K=512)
// travel as fragments. Every window of it repeats one 510-token window, which a small document
// (produced with kcat, as a third-party producer would) puts into the chunk cache first, so
// the GN embeds two windows rather than 1,961.
func TestStagesHugeDocument(t *testing.T) {
	s := newStageSetup(t)
	kcat := testenv.Tool(t, "kcat", "kafkacat")
	// 10 tokens per sentence: 51 sentences fill one window of K-2 = 510 content tokens.
	sentence := "the stored window repeats across this very long record. "
	warm := strings.Repeat(sentence, 51)
	huge := strings.Repeat(sentence, 100_000)
	hugeFile := filepath.Join(s.dir, "huge.jsonl")
	line, _ := json.Marshal(map[string]string{"id": "huge", "text": huge})
	if err := os.WriteFile(hugeFile, append(line, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := s.config(t, "huge", hugeFile, "kafka", "  - {type: kafka}")
	cfgText, _ := os.ReadFile(cfgPath)
	for old, repl := range map[string]string{
		"chunking: {k: 64, s: 64}": "chunking: {k: 512, s: 512}", "token_budget: 2048": "token_budget: 4096",
		"max_record_bytes: 262144": "max_record_bytes: 900000",
	} {
		cfgText = []byte(strings.Replace(string(cfgText), old, repl, 1))
	}
	if err := os.WriteFile(cfgPath, cfgText, 0o644); err != nil {
		t.Fatal(err)
	}
	// The stages create the topics; the warm-up document goes in first, through kcat.
	embed := s.start(t, "embed", "embed", cfgPath)
	agg := s.start(t, "aggregate", "aggregate", cfgPath)
	warmLine, _ := json.Marshal(map[string]string{"id": "t:warm", "text": warm})
	deadline := time.Now().Add(time.Minute)
	for {
		c := exec.Command(kcat, "-P", "-b", s.brokers, "-t", s.topics+".raw", "-K", "\t")
		c.Stdin = strings.NewReader("t:warm\t" + string(warmLine) + "\n")
		out, err := c.CombinedOutput()
		if err == nil && len(out) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kcat produce: %v\n%s", err, out)
		}
		time.Sleep(time.Second)
	}
	warmVec, _ := readVectors(t, s.brokers, s.topics+".vectors", []string{"t:warm"}, 3*time.Minute, nil)
	ingest := s.start(t, "ingest", "ingest", "--idle-exit", "2s", cfgPath)
	if err := ingest.Wait(); err != nil {
		t.Fatalf("ingest: %v", err)
	}
	got, _ := readVectors(t, s.brokers, s.topics+".vectors", []string{"t:huge"}, 5*time.Minute, nil)
	stop(t, "embed", embed)
	stop(t, "aggregate", agg)
	h, w := got["t:huge"], warmVec["t:warm"]
	if h.NTokens != 1_000_000 || h.NChunks != 1961 {
		t.Fatalf("huge document: %d tokens in %d chunks, want 1000000 in 1961", h.NTokens, h.NChunks)
	}
	cos := 0.0
	for i := range w.Vector {
		cos += float64(w.Vector[i]) * float64(h.Vector[i])
	}
	// 1,960 of its 1,961 windows are the warm-up window: the mean-pool is all but that vector.
	if cos < 0.999 {
		t.Errorf("cosine(huge, warm-up) = %.6f, want > 0.999", cos)
	}
	sum, _ := os.ReadFile(filepath.Join(s.dir, "embed.log"))
	t.Logf("huge document: %d tokens, %d chunks, cosine to the repeated window %.6f", h.NTokens, h.NChunks, cos)
	if !strings.Contains(string(sum), `"gn_windows": 2`) {
		t.Errorf("the embed stage did not report exactly 2 GN windows: the repeated window was not served from the cache")
	}
}

// feedGrant and feedApplication are minimal USPTO full-text documents (v4.x DTDs).
const feedGrant = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE us-patent-grant SYSTEM "us-patent-grant-v42-2006-08-23.dtd" [ ]>
<us-patent-grant lang="EN" dtd-version="v4.2 2006-08-23">
<us-bibliographic-data-grant>
<publication-reference><document-id><country>US</country><doc-number>07272630</doc-number><kind>B2</kind><date>20070925</date></document-id></publication-reference>
<application-reference appl-type="utility"><document-id><country>US</country><doc-number>10123456</doc-number><date>20040102</date></document-id></application-reference>
<invention-title id="t">Widget &amp; gadget</invention-title>
</us-bibliographic-data-grant>
<abstract id="abstract"><p id="p-0001" num="0000">A widget at 5&#xb0; C.</p></abstract>
<description id="description"><p id="p-0002" num="0001">The widget turns the gadget.</p></description>
<claims id="claims"><claim id="CLM-00001" num="00001"><claim-text>1. A widget comprising a part.</claim-text></claim></claims>
</us-patent-grant>
`

const feedApplication = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE us-patent-application SYSTEM "us-patent-application-v43-2012-12-04.dtd" [ ]>
<us-patent-application lang="EN" dtd-version="v4.3 2012-12-04">
<us-bibliographic-data-application>
<publication-reference><document-id><country>US</country><doc-number>20130014297</doc-number><kind>A1</kind><date>20130117</date></document-id></publication-reference>
<application-reference appl-type="utility"><document-id><country>US</country><doc-number>13181234</doc-number><date>20110712</date></document-id></application-reference>
<invention-title>Glove</invention-title>
</us-bibliographic-data-application>
<abstract><p>A glove.</p></abstract>
<description><p num="0001">Gloves are &lsquo;good&rsquo;.</p></description>
<claims><claim num="1"><claim-text>1. A glove.</claim-text></claim></claims>
</us-patent-application>`

// TestStagesUSPTOXMLFeed: a feed pushed into Kafka as one patent XML document per record (by
// kcat, one file per message) is read with raw_format uspto-xml: patents become vectors keyed
// by their doc id, a sequence listing is skipped, and a broken document is dead-lettered.
func TestStagesUSPTOXMLFeed(t *testing.T) {
	s := newStageSetup(t)
	kcat := testenv.Tool(t, "kcat", "kafkacat")
	cfgPath := s.config(t, "feed", filepath.Join(s.dir, "unused"), "kafka", "  - {type: kafka}")
	cfgText, _ := os.ReadFile(cfgPath)
	cfgText = []byte(strings.Replace(string(cfgText), "source: {type: jsonl,", "source: {type: uspto, sections: [title, abstract, claims, description],", 1))
	cfgText = []byte(strings.Replace(string(cfgText), "max_record_bytes: 262144}", "max_record_bytes: 262144, raw_format: uspto-xml}", 1))
	cfgText = []byte(strings.Replace(string(cfgText), ", name: t}", "}", 1))
	if err := os.WriteFile(cfgPath, cfgText, 0o644); err != nil {
		t.Fatal(err)
	}
	var files []string
	for name, xml := range map[string]string{
		"1-grant.xml": feedGrant, "2-application.xml": feedApplication,
		"3-sequence.xml": `<?xml version="1.0"?><!DOCTYPE sequence-cwu SYSTEM "us-sequence-listing-2004-03-09.dtd" [ ]><sequence-cwu><s100>ACGT</s100></sequence-cwu>`,
		"4-broken.xml":   strings.Replace(feedGrant, "</us-patent-grant>", "", 1),
	} {
		p := filepath.Join(s.dir, name)
		if err := os.WriteFile(p, []byte(xml), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	proc := s.start(t, "process", "process", cfgPath)
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.Command(kcat, append([]string{"-P", "-b", s.brokers, "-t", s.topics + ".raw"}, files...)...).CombinedOutput()
		if err == nil && len(out) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kcat produce: %v\n%s", err, out)
		}
		time.Sleep(time.Second)
	}
	got, _ := readVectors(t, s.brokers, s.topics+".vectors", []string{"uspto:US07272630B2", "uspto:US20130014297A1"}, 3*time.Minute, nil)
	g := got["uspto:US07272630B2"]
	if g.Version != "20070925B2" || g.Title != "Widget & gadget" || g.NChunks != 1 {
		t.Errorf("grant vector %+v", g)
	}
	out, err := exec.Command(kcat, "-C", "-b", s.brokers, "-t", s.topics+".deadletter", "-e", "-q", "-f", "%h\n").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "rp-stage=source") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Errorf("dead-letter topic holds %q, want exactly the broken document", out)
	}
	// The value has the dead-letter file's shape, field for field.
	val, err := exec.Command(kcat, "-C", "-b", s.brokers, "-t", s.topics+".deadletter", "-e", "-q", "-f", "%s\n").Output()
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(val))
	dec.DisallowUnknownFields()
	var rec schemas.DeadLetterRecord
	if err := dec.Decode(&rec); err != nil {
		t.Fatalf("dead letter %q: %v", val, err)
	}
	if _, err := time.Parse(time.RFC3339, rec.Time); err != nil || rec.Stage != "source" || rec.Error == "" || rec.Position == "" {
		t.Errorf("dead letter %+v", rec)
	}
	stop(t, "process", proc)
	log, _ := os.ReadFile(filepath.Join(s.dir, "process.log"))
	if !strings.Contains(string(log), `"sequence-listing": 1`) {
		t.Errorf("the run summary does not count the skipped sequence listing:\n%s", tail(string(log), 2000))
	}
}
