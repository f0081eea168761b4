package reign

import (
	"strings"
	"testing"
)

func TestCheckSpace(t *testing.T) {
	ck := &Checkpoint{GNDim: 384}
	in := Space{GNName: "bge-small-en-v15", GNFingerprint: "fp-bge", GNDim: 384, K: 512, S: 512}
	good := Manifest{GNName: "bge-small-en-v15", GNFingerprint: "fp-bge", GNDim: 384, K: 512, S: 512}
	cases := []struct {
		name      string
		manifest  *Manifest
		trainedOn string
		in        Space
		want      string // "" = accepted
	}{
		{"matching manifest", &good, "", in, ""},
		{"other GN", &Manifest{GNName: "all-minilm-l6-v2", GNFingerprint: "fp-minilm", GNDim: 384, K: 512, S: 512}, "", in, "mixing GN spaces is refused"},
		{"other windows", &Manifest{GNFingerprint: "fp-bge", GNDim: 384, K: 512, S: 384}, "", in, "K=512 S=384"},
		{"no manifest, not named", nil, "", in, "aggregate.trained_on"},
		{"no manifest, named by name", nil, "bge-small-en-v15", in, ""},
		{"no manifest, named by fingerprint", nil, "fp-bge", in, ""},
		{"no manifest, named wrong", nil, "e5-small-v2", in, "was trained on \"e5-small-v2\""},
		{"dimension", &good, "", Space{GNName: "x", GNFingerprint: "fp-bge", GNDim: 768, K: 512, S: 512}, "takes 384-dimensional"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.manifest != nil {
				if err := WriteManifest(dir, *c.manifest); err != nil {
					t.Fatal(err)
				}
			}
			err := CheckSpace(dir, ck, c.in, c.trainedOn)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}
