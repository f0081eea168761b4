package pgcdc

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// parse decodes one pgoutput message. pglogrepl trusts a message's lengths: a column length
// past the message's end makes it allocate that much (up to 4 GiB) and then index past the
// end. The rows of a change are checked first, and anything else malformed is recovered: an
// error of the stream, said as such, not a crash of the run.
func parse(data []byte) (m pglogrepl.Message, err error) {
	if err := checkTuples(data); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("a malformed message (%v)", r)
		}
	}()
	return pglogrepl.Parse(data)
}

// checkTuples checks that the rows of an insert, update or delete message, and the relation
// list of a truncate, fit in it.
func checkTuples(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	short := errors.New("a malformed change message (a row longer than the message)")
	switch b[0] {
	case 'I', 'U', 'D':
	case 'T': // a relation count, options, the relations' ids
		if len(b) < 6 || uint64(b[1])<<24|uint64(b[2])<<16|uint64(b[3])<<8|uint64(b[4]) > uint64(len(b)-6)/4 {
			return short
		}
		return nil
	default:
		return nil
	}
	at := 5 // type and relation id
	for at < len(b) {
		kind := b[at]
		at++
		if kind != 'N' && kind != 'K' && kind != 'O' {
			return nil // not a row: pglogrepl says what it is
		}
		if at+2 > len(b) {
			return short
		}
		n := int(b[at])<<8 | int(b[at+1])
		at += 2
		for i := 0; i < n; i++ {
			if at >= len(b) {
				return short
			}
			c := b[at]
			at++
			if c == 't' || c == 'b' {
				if at+4 > len(b) {
					return short
				}
				l := uint64(b[at])<<24 | uint64(b[at+1])<<16 | uint64(b[at+2])<<8 | uint64(b[at+3])
				at += 4
				if l > uint64(len(b)-at) {
					return short
				}
				at += int(l)
			}
		}
	}
	return nil
}

// value is one column of a logged tuple: its text, or nil for NULL; toasted says the log
// left a large unchanged value out.
func value(t *pglogrepl.TupleData, i int) (v *string, toasted bool, err error) {
	if t == nil || i >= len(t.Columns) || t.Columns[i] == nil {
		return nil, false, fmt.Errorf("the logged row has no column %d", i+1)
	}
	c := t.Columns[i]
	switch c.DataType {
	case pglogrepl.TupleDataTypeNull:
		return nil, false, nil
	case pglogrepl.TupleDataTypeToast:
		return nil, true, nil
	case pglogrepl.TupleDataTypeText:
		s := string(c.Data)
		return &s, false, nil
	}
	// The source asks for text values only (no binary option).
	return nil, false, fmt.Errorf("the logged row's column %d is in an unexpected format %q", i+1, c.DataType)
}

// rowOf is the followed values of a new row; toasted says a title or text value was left out.
func (r *relation) rowOf(t *pglogrepl.TupleData) (row, bool, error) {
	var out row
	var err error
	var toasted, tz bool
	if out.id, tz, err = value(t, r.id); err != nil {
		return row{}, false, err
	}
	if tz {
		return row{}, false, errors.New("the logged row left out its id")
	}
	if r.title >= 0 {
		if out.title, tz, err = value(t, r.title); err != nil {
			return row{}, false, err
		}
		toasted = toasted || tz
	}
	for _, i := range r.text {
		v, tz, err := value(t, i)
		if err != nil {
			return row{}, false, err
		}
		toasted = toasted || tz
		out.text = append(out.text, v)
	}
	return out, toasted, nil
}

// idOf is the id of an old row (a delete's, or an update's that changed the key): the
// replica identity the log carries must hold it.
func (r *relation) idOf(t *pglogrepl.TupleData) (string, error) {
	v, tz, err := value(t, r.id)
	if err != nil {
		return "", err
	}
	if v == nil || tz {
		return "", errors.New("a logged old row does not hold the id")
	}
	return *v, nil
}
