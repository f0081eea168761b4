package gn

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// TestIdentifyIsLoad: the fingerprint and dimension learnt without ORT are the loaded model's.
func TestIdentifyIsLoad(t *testing.T) {
	for _, name := range gns {
		model, tok := testenv.GN(t, name)
		cfg := Config{Name: name, Model: model, Tokenizer: tok}
		id, err := Identify(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := loadGN(t, name)
		if !reflect.DeepEqual(id, m.Identity()) || id.Fingerprint != m.Fingerprint() || id.Dim != m.Dim() || id.Name != m.Name() {
			t.Fatalf("%s: Identify %+v, Load %+v (fingerprint %s, dim %d)", name, id, m.Identity(), m.Fingerprint(), m.Dim())
		}
		if id.Dim != 384 || id.Output != "last_hidden_state" || len(id.Inputs) != 3 {
			t.Fatalf("%s: unexpected identity %+v", name, id)
		}
	}
}

func TestIdentifyRefusesWhatLoadWould(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "tokenizer.json")
	notModel := filepath.Join(dir, "model.onnx")
	for _, p := range []string{tok, notModel} {
		if err := os.WriteFile(p, []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]struct {
		cfg  Config
		want string
	}{
		"not a model":      {Config{Model: notModel, Tokenizer: tok}, notModel},
		"no model file":    {Config{Model: filepath.Join(dir, "absent.onnx"), Tokenizer: tok}, "absent.onnx"},
		"no tokenizer":     {Config{Model: notModel, Tokenizer: filepath.Join(dir, "absent.json")}, "absent.json"},
		"invalid config":   {Config{Model: notModel}, "tokenizer path is empty"},
		"unknown provider": {Config{Model: notModel, Tokenizer: tok, Provider: "tpu"}, "tpu"},
	} {
		if _, err := Identify(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, c.want)
		}
	}
}
