package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	kafka "github.com/segmentio/kafka-go"

	"github.com/reignpipe/reignpipe/stages/chunk"
)

// doc is one line of the corpus the harness writes; group is the family of documents that share
// a description in scenario B (-1: none).
type doc struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Text  string `json:"text"`
	group int
}

// corpus is a scenario's documents with what the GN would have to embed at best: the windows
// the project's tokenizer and chunker cut from them (chunk.Cut, the runner's path), keyed as the
// cache keys them.
type corpus struct {
	docs     []doc
	windows  int // over every document
	distinct int // distinct window keys
	// partition of each document's raw record (murmur2 of the doc id, as the producer places it).
	partition map[string]int
}

// tokenCounter counts a text's content tokens with the GN's tokenizer. Tokens never span
// whitespace, so the count of a text is the sum over its sentences.
type tokenCounter struct{ tok chunk.Tokenizer }

func (t tokenCounter) count(s string) int { return len(t.tok.AppendEncode(nil, s)) }

// prose makes English-ish technical text (patent-description style) from a seeded source: long
// enough texts of it tokenize to about 1.2 WordPiece tokens a word, like real prose, and no two
// sentences of two documents coincide unless the generator is asked to repeat them.
type prose struct {
	rng *rand.Rand
	tc  tokenCounter
}

var (
	subjects = []string{"the housing", "a first member", "the controller", "the sensor array", "each module",
		"the second portion", "the fastening element", "an outer sleeve", "the processing unit", "the valve assembly",
		"the receiving circuit", "a support frame", "the drive shaft", "the storage medium", "the coupling",
		"the light source", "the cooling channel", "a flexible strip", "the base plate", "the signal path"}
	verbs = []string{"is coupled to", "extends along", "is arranged adjacent to", "engages", "is formed integrally with",
		"rotates relative to", "transmits a signal to", "is mounted on", "surrounds", "is spaced apart from",
		"receives power from", "is configured to regulate", "is positioned between", "supports", "is detachably connected to"}
	objects = []string{"the lower surface", "a locking pin", "the main body", "the upper edge of the frame",
		"a plurality of openings", "the inlet port", "the central axis", "the first electrode", "the display panel",
		"a resilient member", "the outer wall", "the memory controller", "a recess in the cover", "the output stage",
		"the guide rail", "the heat exchanger", "the adjacent cell", "a threaded bore", "the bearing", "the filter layer"}
	modifiers = []string{"in a preferred embodiment", "as shown in FIG. 3", "when the device is in the closed position",
		"during normal operation", "according to another aspect", "without requiring additional tools",
		"so that wear is reduced", "at a predetermined interval", "in response to a control signal",
		"under a load of several newtons", "as described above", "in the illustrated example",
		"while the temperature remains below a threshold", "for each of the channels", "in some implementations"}
	openers = []string{"In one embodiment,", "Referring again to the drawings,", "It will be appreciated that",
		"Alternatively,", "In this arrangement,", "Furthermore,", "As a result,", "In operation,", "Preferably,",
		"By way of example,"}
	topics = []string{"fluid pump", "battery enclosure", "optical connector", "seat adjustment mechanism",
		"data storage system", "wind turbine blade", "medical infusion device", "roof drainage fitting",
		"wireless charging pad", "industrial mixer", "hinge assembly", "water filtration cartridge",
		"bicycle brake", "display backlight", "packaging closure", "robotic gripper", "solar mounting rail",
		"hearing aid housing", "garden sprayer", "cable management tray"}
)

func (p *prose) pick(ws []string) string { return ws[p.rng.IntN(len(ws))] }

// sentence is one sentence; the numbers in it make sentences of different documents differ.
func (p *prose) sentence() string {
	var b strings.Builder
	if p.rng.IntN(3) == 0 {
		b.WriteString(p.pick(openers) + " ")
		b.WriteString(p.pick(subjects))
	} else {
		s := p.pick(subjects)
		b.WriteString(strings.ToUpper(s[:1]) + s[1:])
	}
	fmt.Fprintf(&b, " %d %s %s", 10+p.rng.IntN(490), p.pick(verbs), p.pick(objects))
	if p.rng.IntN(2) == 0 {
		fmt.Fprintf(&b, " %d", 10+p.rng.IntN(490))
	}
	if p.rng.IntN(2) == 0 {
		b.WriteString(", " + p.pick(modifiers))
	}
	if p.rng.IntN(3) == 0 {
		fmt.Fprintf(&b, ", and %s %s %s", p.pick(subjects), p.pick(verbs), p.pick(objects))
	}
	b.WriteString(".")
	return b.String()
}

// text is paragraphs of sentences whose tokens add up to at most max and at least min (the
// first sentence past min ends it), with its token count.
func (p *prose) text(min, max int) (string, int) {
	var paras []string
	var para []string
	n := 0
	for n < min {
		s := p.sentence()
		c := p.tc.count(s)
		if n+c > max {
			if n > 0 {
				break
			}
			continue
		}
		para = append(para, s)
		n += c
		if len(para) >= 3+p.rng.IntN(5) {
			paras = append(paras, strings.Join(para, " "))
			para = nil
		}
	}
	if len(para) > 0 {
		paras = append(paras, strings.Join(para, " "))
	}
	return strings.Join(paras, "\n"), n
}

// scenarioA is docs distinct documents of one to three 512-token windows each (about two on
// average: 36 documents give about 71 windows, as in the report this harness reproduces).
func scenarioA(p *prose, docs int) []doc {
	const l = 510 // content tokens of a full window at K = 512
	out := make([]doc, docs)
	for i := range out {
		w := 1 + p.rng.IntN(3)
		lo := (w-1)*l + 40
		hi := w*l - 10
		text, _ := p.text(lo+p.rng.IntN(hi-lo-30), hi)
		out[i] = doc{ID: fmt.Sprintf("a%03d", i), Title: "A " + p.pick(topics), Text: text, group: -1}
	}
	return out
}

// scenarioB is families of two or three documents (patent continuations): each family shares
// a long description of three to five full windows, which comes first, and each member ends with
// claims of its own. With the reference's fixed windows a window is shared only if the text
// before it is too, so the shared part leads: every full window of the description is the same
// key in each member, the windows after it are the member's own. Members get ids that put them
// on pairwise different partitions of the raw topic, and are written next to each other, as a
// week's publication file lists them.
func scenarioB(p *prose, families, partitions int) []doc {
	const l = 510
	var out []doc
	next := 1000
	for g := 0; g < families; g++ {
		members := 2 + p.rng.IntN(2)
		desc, _ := p.text(3*l+p.rng.IntN(2*l), 5*l+l/2)
		topic := p.pick(topics)
		used := map[int]bool{}
		for m := 0; m < members; m++ {
			var id string
			for {
				id = fmt.Sprintf("US%08d", 10_000_000+next)
				next++
				if part := partitionOf(docID(id), partitions); !used[part] {
					used[part] = true
					break
				}
			}
			claims, _ := p.text(80+p.rng.IntN(200), 400)
			out = append(out, doc{ID: id, Title: fmt.Sprintf("%s (continuation %d)", strings.ToUpper(topic[:1])+topic[1:], m), Text: desc + "\n" + claims, group: g})
		}
	}
	return out
}

// source is the pipeline's source name: a document's id on the topics is source:id.
const source = "eo"

func docID(id string) string { return source + ":" + id }

// partitionOf is where the producer puts a record keyed key: murmur2, the balancer the
// project's producer uses (internal/kafkaclient), as Java clients place keys.
func partitionOf(key string, n int) int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(key)}, parts...)
}

// measure cuts every document into the pipeline's windows and counts them and their distinct
// keys, as the runner would key them (the GN's fingerprint, K, S).
func measure(docs []doc, tok chunk.Tokenizer, params chunk.Params, fingerprint string, partitions int) corpus {
	c := corpus{docs: docs, partition: map[string]int{}}
	keys := map[uint64]bool{}
	for _, d := range docs {
		ws, _ := params.Cut(tok, d.Text, false)
		c.windows += len(ws)
		for _, w := range ws {
			keys[chunk.Key(fingerprint, params, w)] = true
		}
		c.partition[docID(d.ID)] = partitionOf(docID(d.ID), partitions)
	}
	c.distinct = len(keys)
	return c
}

func writeJSONL(path string, docs []doc) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
