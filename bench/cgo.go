// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// CgoBenchName is the file name of the cgo baseline binary that
// `gpurt bench` looks for beside its own executable.
const CgoBenchName = "gpurt-cgobench"

// runCgoBench runs the cgo baseline binary on the plugin the runtime
// loaded and returns its JSON lines by metric, and the lines it wrote on
// stderr (the figures it skipped, and why) without its name's prefix.
func runCgoBench(bin, plugin, options string, quick bool) (map[string]Result, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"--json", "--plugin-path", plugin}
	if quick {
		args = append(args, "--quick")
	}
	if options != "" {
		args = append(args, "--options", options)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("%s failed: %v: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	res := map[string]Result{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var x Result
		if err := json.Unmarshal(line, &x); err != nil {
			return nil, nil, fmt.Errorf("%s printed a line that is not a result (%v): %q", bin, err, line)
		}
		res[x.Metric] = x
	}
	if _, ok := res["dispatch_cgo_ns"]; !ok {
		return nil, nil, fmt.Errorf("%s printed no dispatch_cgo_ns", bin)
	}
	var notes []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if line = strings.TrimSpace(strings.TrimPrefix(line, CgoBenchName+": ")); line != "" {
			notes = append(notes, line)
		}
	}
	return res, notes, nil
}
