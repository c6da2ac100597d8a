// SPDX-License-Identifier: Apache-2.0

// Package readmetest runs every command README.md shows: each line of its
// shell code blocks and each inline code span that is a command (it starts
// with make, go, bash, build/, scripts/ or .ci/, or with VAR=value before
// one of those, and has an argument). A command that needs an NVIDIA GPU,
// nvcc or the network, or that make test runs already (make test itself
// among them), is skipped with the reason; a usage synopsis (with
// [optional] parts) is checked against the command's -h output; a command
// that no rule knows fails the test, so a new one gets a rule.
package readmetest
