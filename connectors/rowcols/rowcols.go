// Package rowcols is the one check of the keys that say which columns of a table row make a
// document (id_column, title_column, text_columns): the postgres source and the debezium source
// read rows and take the same keys, meaning the same.
package rowcols

// Check reports the first bad column key through bad, by its key ("text_columns"): an id
// column is named, at least one text column, none empty and no column under two keys.
func Check(id, title string, text []string, bad func(key, format string, args ...any) error) error {
	switch {
	case id == "":
		return bad("id_column", "name the column holding the document id, e.g. id_column: id")
	case len(text) == 0:
		return bad("text_columns", "name at least one column holding the text, e.g. text_columns: [body]")
	}
	seen := map[string]string{id: "id_column"}
	if title != "" {
		if k, ok := seen[title]; ok {
			return bad("title_column", "%q is already source.%s", title, k)
		}
		seen[title] = "title_column"
	}
	for _, col := range text {
		if col == "" {
			return bad("text_columns", "a column name is empty")
		}
		if k, ok := seen[col]; ok {
			return bad("text_columns", "%q is already source.%s", col, k)
		}
		seen[col] = "text_columns"
	}
	return nil
}
