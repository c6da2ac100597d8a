// SPDX-License-Identifier: Apache-2.0

//go:build race

package conform_test

// raceDetector: this test binary was built with -race.
const raceDetector = true
