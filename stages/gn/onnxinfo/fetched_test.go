package onnxinfo

import (
	"path/filepath"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
	ort "github.com/yalue/onnxruntime_go"
)

// TestFetchedModelsAgreeWithORT reads every fetched GN both ways: the declarations parsed here
// must be what an ONNX Runtime session reports (ORT shows a symbolic dimension as -1).
func TestFetchedModelsAgreeWithORT(t *testing.T) {
	models, _ := filepath.Glob(filepath.Join(testenv.Home(), "gn", "*", "model.onnx"))
	if len(models) == 0 {
		testenv.Missing(t, "no GN fetched under %s/gn: run ops/fetch", testenv.Home())
	}
	ort.SetSharedLibraryPath(testenv.ORTLibrary(t))
	if err := ort.InitializeEnvironment(ort.WithLogLevelWarning()); err != nil {
		t.Fatal(err)
	}
	defer ort.DestroyEnvironment()
	for _, path := range models {
		t.Run(filepath.Base(filepath.Dir(path)), func(t *testing.T) {
			got, err := Read(path)
			if err != nil {
				t.Fatal(err)
			}
			ins, outs, err := ort.GetInputOutputInfo(path)
			if err != nil {
				t.Fatal(err)
			}
			compare(t, "input", got.Inputs, ins)
			compare(t, "output", got.Outputs, outs)
		})
	}
}

func compare(t *testing.T, kind string, got []Value, want []ort.InputOutputInfo) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d %ss, ORT reports %d", len(got), kind, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name || !g.Tensor || w.OrtValueType != ort.ONNXTypeTensor || g.ElemType != int32(w.DataType) {
			t.Errorf("%s %d: %+v, ORT reports %s", kind, i, g, w.String())
			continue
		}
		if len(g.Shape) != len(w.Dimensions) {
			t.Errorf("%s %s: shape %v, ORT reports %v", kind, g.Name, g.Shape, w.Dimensions)
			continue
		}
		for j, d := range g.Shape {
			v := d.Value
			if v <= 0 {
				v = -1
			}
			if v != w.Dimensions[j] {
				t.Errorf("%s %s: dimension %d is %+v, ORT reports %d", kind, g.Name, j, d, w.Dimensions[j])
			}
		}
		t.Logf("%s %s: %v", kind, g.Name, g.Shape)
	}
}
