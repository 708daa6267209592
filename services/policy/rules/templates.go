package rules

import (
	"embed"
	"fmt"
)

//go:embed templates/*.cedar
var templateFS embed.FS

// Template returns the shipped default policy set of party, the starting
// point a tenant or person edits. Every template validates (rules_test).
func Template(party Party) ([]byte, error) {
	if !party.Valid() {
		return nil, fmt.Errorf("rules: no template for unknown party %q", party)
	}
	b, err := templateFS.ReadFile("templates/" + string(party) + ".cedar")
	if err != nil {
		return nil, fmt.Errorf("rules: template %s: %w", party, err)
	}
	return b, nil
}
