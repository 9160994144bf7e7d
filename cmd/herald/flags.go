package main

import (
	"fmt"
	"strings"
)

// parsePairs turns "name=value" flag values into a map. flag names the flag
// in error messages.
func parsePairs(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--%s %q: want name=value", flag, p)
		}
		m[name] = value
	}
	return m, nil
}
