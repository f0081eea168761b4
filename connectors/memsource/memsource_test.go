package memsource

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/reignpipe/reignpipe/connectors"
)

func TestRead(t *testing.T) {
	docs := []Doc{
		{ID: "a", Title: "A", Text: "first"},
		{ID: "b", Text: "  \n"}, // blank
		{ID: "", Text: "no id"},
		{ID: "c", Title: "C\x01", Text: "bad \xff byte", Version: "7"},
	}
	for _, tc := range []struct {
		name      string
		keepEmpty bool
		want      []string // ids handed out, "bad" for a bad input
		skipped   int64
	}{
		{"blank skipped", false, []string{"m:a", "bad", "m:c"}, 1},
		{"blank kept", true, []string{"m:a", "m:b", "bad", "m:c"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := New(Options{Source: "m", Len: len(docs), At: func(i int) Doc { return docs[i] }, KeepEmpty: tc.keepEmpty})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for {
				d, ack, err := src.Read(context.Background())
				if errors.Is(err, io.EOF) {
					break
				}
				var bad *connectors.BadInputError
				switch {
				case errors.As(err, &bad):
					if bad.Position != "m document 3" || ack == nil {
						t.Errorf("bad input %v", bad)
					}
					got = append(got, "bad")
				case err != nil:
					t.Fatal(err)
				default:
					got = append(got, d.ID)
					if d.ID == "m:c" && (d.Text != "bad \uFFFD byte" || d.Title != "C" || d.Version != "7" || d.Source != "m") {
						t.Errorf("document c: %+v", d)
					}
					if err := ack(context.Background(), nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("read %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("read %v, want %v", got, tc.want)
				}
			}
			st := src.Stats()
			if st.Read != int64(len(tc.want)-1) || st.Skipped["empty"] != tc.skipped || len(st.Text) == 0 {
				t.Errorf("stats %+v", st)
			}
			if err := src.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, _, err := src.Read(context.Background()); err == nil || errors.Is(err, io.EOF) {
				t.Errorf("read after close: %v", err)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []Options{{}, {Source: "a:b"}, {Source: "m", Len: -1}, {Source: "m", Len: 2}} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	src, err := New(Options{Source: "m", Len: 1, At: func(int) Doc { return Doc{ID: "a", Text: "x"} }})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.Read(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled read: %v", err)
	}
}
