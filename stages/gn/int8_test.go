package gn

import (
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/stages/wordpiece"
)

// int8Text is ordinary English prose, repeated into windows of several lengths: quantisation
// error is measured on text like the corpora's, not on random ids.
const int8Text = `The river rises in the hills north of the town and flows south through farmland before it
reaches the sea. In the nineteenth century a canal was cut beside it so that barges could carry coal
and grain to the port, and several mills were built along its banks. Most of them closed after the
railway arrived, but two have been restored and are open to visitors in the summer. The valley is
known for its orchards, and a festival is held each autumn when the apples are harvested. A patent
claim describes a method for encoding a signal in which a processor receives a frame of samples,
computes a transform, quantises the coefficients and writes them to a buffer for transmission. `

// TestInt8VariantsTrackFP32 checks that an int8 variant still computes its parent's function: a
// model that answered the same wrong vector for every batch would pass TestBatchInvariance.
// Each window's int8 vector must stay within cosine 0.98 of the fp32 one (0.99 on average);
// ops/bench/results/peers-2026-12-01d.md measured 0.9963 mean, 0.9935 minimum for int8r.
func TestInt8VariantsTrackFP32(t *testing.T) {
	for _, name := range gns {
		tokPath := testenv.Tokenizer(t, name)
		tok, err := wordpiece.Load(tokPath)
		if err != nil {
			t.Fatal(err)
		}
		ids := tok.Encode(strings.Repeat(int8Text, 8))
		var ws [][]int32
		for _, n := range []int{510, 300, 120, 40, 9} {
			w := append([]int32{101}, ids[len(ws)*7:len(ws)*7+n]...)
			ws = append(ws, append(w, 102))
		}
		parent := loadGN(t, name)
		want := embedOne(t, parent, ws...)
		for _, variant := range builtVariants(t, name, "-int8r", "-int8s") {
			t.Run(variant, func(t *testing.T) {
				got := embedOne(t, loadGN(t, variant), ws...)
				sum, low := 0.0, 1.0
				for i := range ws {
					c := cosine(got[i], f64(want[i]))
					sum, low = sum+c, min(low, c)
				}
				mean := sum / float64(len(ws))
				t.Logf("%s vs fp32 on %d prose windows: cosine mean %.5f, min %.5f", variant, len(ws), mean, low)
				if low < 0.98 || mean < 0.99 {
					t.Fatalf("%s drifted from its fp32 parent: cosine mean %.5f, min %.5f", variant, mean, low)
				}
			})
		}
	}
}
