// SPDX-License-Identifier: Apache-2.0

// Package commalist reads the comma-separated lists that flags and
// options take ("64K,1M", "1,16", "1024/4096/24,2048/8192/16"): one loop
// for the packages that parse such lists into their own values.
package commalist

import "strings"

// Parse gives every item of the comma-separated list s to parse, in
// order, as written (parse trims it if it wants), and returns the values;
// parse's first error is Parse's. Empty items and items of white space
// alone are skipped: the result is empty (nil) when s has none, which the
// caller may refuse with its own message.
func Parse[T any](s string, parse func(item string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
