package pgcdc

import (
	"encoding/binary"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/reignpipe/reignpipe/schemas"
)

// Version orders (position, ordinal) pairs as schemas.CompareVersions orders their versions.
func FuzzVersionOrder(f *testing.F) {
	f.Add(uint64(0), uint32(0), uint64(0), uint32(1))
	f.Add(uint64(1<<40), uint32(5), uint64(1<<40+1), uint32(0))
	f.Add(uint64(^uint64(0)), uint32(4294967295), uint64(9), uint32(0))
	f.Fuzz(func(t *testing.T, a uint64, ao uint32, b uint64, bo uint32) {
		va, vb := Version(pglogrepl.LSN(a), int(ao)), Version(pglogrepl.LSN(b), int(bo))
		want := 0
		switch {
		case a < b || (a == b && ao < bo):
			want = -1
		case a > b || (a == b && ao > bo):
			want = 1
		}
		if got := schemas.CompareVersions(va, vb); got != want {
			t.Fatalf("CompareVersions(%s, %s) = %d, want %d", va, vb, got, want)
		}
	})
}

// tupleMessage is a pgoutput insert of relation 1 with the given columns: kinds[i] is the
// column's type byte ('n', 'u', 't', or anything), data its text.
func tupleMessage(kinds []byte, data [][]byte) []byte {
	b := []byte{'I', 0, 0, 0, 1, 'N'}
	b = binary.BigEndian.AppendUint16(b, uint16(len(kinds)))
	for i, k := range kinds {
		b = append(b, k)
		if k == 't' || k == 'b' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(data[i])))
			b = append(b, data[i]...)
		}
	}
	return b
}

// Whatever a logged row holds, its decoding returns values or an error, never panics, and a
// row it accepts has the id and every text column it was asked for.
func FuzzParseChange(f *testing.F) {
	f.Add(tupleMessage([]byte("ttt"), [][]byte{[]byte("7"), []byte("a title"), []byte("text")}), 0, 1, 2)
	f.Add(tupleMessage([]byte("tnu"), [][]byte{[]byte("7"), nil, nil}), 0, 1, 2)
	f.Add(tupleMessage([]byte("ut"), [][]byte{nil, []byte("x")}), 0, -1, 1)
	f.Add(tupleMessage([]byte("tb"), [][]byte{[]byte("1"), {0, 1}}), 0, -1, 1)
	f.Add([]byte{'I', 0, 0, 0, 1, 'N', 0, 9, 't', 0xff, 0xff, 0xff, 0xff}, 0, -1, 1)
	f.Add([]byte{'D', 0, 0, 0, 1, 'K', 0, 1, 't', 0, 0, 0, 1, '5'}, 0, -1, 0)
	f.Fuzz(func(t *testing.T, msg []byte, id, title, text int) {
		if id < 0 || id > 64 || title < -1 || title > 64 || text < 0 || text > 64 {
			return
		}
		m, err := parse(msg)
		if err != nil {
			return
		}
		rel := &relation{id: id, title: title, text: []int{text, id}}
		var tup *pglogrepl.TupleData
		switch m := m.(type) {
		case *pglogrepl.InsertMessage:
			tup = m.Tuple
		case *pglogrepl.UpdateMessage:
			tup = m.NewTuple
			if m.OldTuple != nil {
				if v, err := rel.idOf(m.OldTuple); err == nil && v == "" && m.OldTuple.Columns[id].Length != 0 {
					t.Fatalf("old id of %d bytes decoded empty", m.OldTuple.Columns[id].Length)
				}
			}
		case *pglogrepl.DeleteMessage:
			if _, err := rel.idOf(m.OldTuple); err == nil && m.OldTuple.Columns[id].DataType != 't' {
				t.Fatalf("an id from a column of type %q", m.OldTuple.Columns[id].DataType)
			}
			return
		default:
			return
		}
		r, _, err := rel.rowOf(tup)
		if err != nil {
			return
		}
		if len(r.text) != 2 || (r.id == nil) != (tup.Columns[id].DataType == 'n') {
			t.Fatalf("row %+v from %+v", r, tup.Columns)
		}
		if r.id != nil && *r.id != string(tup.Columns[id].Data) {
			t.Fatalf("id %q from %q", *r.id, tup.Columns[id].Data)
		}
	})
}
