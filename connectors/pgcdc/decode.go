package pgcdc

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

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
