// SPDX-License-Identifier: Apache-2.0

// Package tests holds repository-wide checks that belong to no package:
// that the shipped core stays free of cgo, that no symbolic link is
// tracked, that every environment variable read is documented.
package tests
