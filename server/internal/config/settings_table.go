package config

import "strings"

// SettingsTable is the Markdown table of every setting that docs/operations.md
// carries between its settings markers (a test keeps the two equal).
func SettingsTable() string {
	var b strings.Builder
	b.WriteString("| Variable | Flag | Default | Accepts | Meaning |\n|---|---|---|---|---|\n")
	cell := strings.NewReplacer("|", `\|`, "\n", " ").Replace
	for _, s := range settings {
		def := "(empty)"
		if s.def != "" {
			def = "`" + s.def + "`"
		}
		b.WriteString("| `" + s.env + "` | `--" + s.flag + "` | " + def + " | " + cell(s.set.accepts) + " | " + cell(s.usage) + " |\n")
	}
	return b.String()
}
