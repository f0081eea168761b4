package wikipedia

// segment is a byte range of the dump that decompresses on its own: one bz2 stream (or, for
// the last one, the final page stream and the closing stream) of a multistream dump, or the
// whole file otherwise.
type segment struct {
	off, end int64
	first    bool    // holds the start of the document (BOM, <siteinfo>)
	missing  []int64 // index offsets of streams past the end of a truncated file
}

// segmentsFor splits a dump of size bytes at the index offsets. The bytes before the first
// offset are the stream holding <mediawiki> and <siteinfo>. Offsets at or past size make one
// last segment of streams the file lacks.
func segmentsFor(offs []int64, size int64) []segment {
	segs := make([]segment, 0, len(offs)+2)
	if offs[0] > 0 {
		segs = append(segs, segment{off: 0, end: offs[0]})
	}
	for i, o := range offs {
		if o >= size {
			segs = append(segs, segment{off: size, end: size, missing: offs[i:]})
			break
		}
		end := size
		if i+1 < len(offs) {
			end = min(offs[i+1], size)
		}
		segs = append(segs, segment{off: o, end: end})
	}
	segs[0].first = true
	return segs
}
