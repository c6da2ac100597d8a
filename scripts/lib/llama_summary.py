# SPDX-License-Identifier: Apache-2.0
"""llama_summary.py LOG LABEL: the summary of one build/llama run (its JSON
lines in LOG), for the GPU scripts (gpu_skinny.sh, gpu_gemv.sh): a line per
summary row, "<preset> <LABEL> <mode> batch <b>: <tok/s> tok/s, host <us>
us/step" (with "(launch <us>, plan <us>[, stage <us>])" when the summary
has host_launch_us_per_step and host_plan_us_per_step), then how many steps'
graph tokens equal eager's."""
import json
import sys


def main(path, label):
    steps = {}
    for line in open(path):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r["kind"] == "summary":
            parts = "host_launch_us_per_step" in r and "host_plan_us_per_step" in r
            print("%s %s %s batch %d: %.1f tok/s, host %.1f us/step%s"
                  % (r["preset"], label, r["mode"], r["batch"], r["tokens_per_s"], r["host_us_per_step"],
                     " (launch %.1f, plan %.1f%s)" % (r["host_launch_us_per_step"], r["host_plan_us_per_step"],
                                                     ", stage %.1f%s" % (r["host_stage_us_per_step"],
                                                                         " (upload %.1f)" % r["host_upload_us_per_step"]
                                                                         if "host_upload_us_per_step" in r else "")
                                                     if "host_stage_us_per_step" in r else "")
                     if parts else ""))
        elif r["kind"] == "step":
            steps.setdefault((r["batch"], r["step"]), {})[r["mode"]] = r["tokens"]
    same = sum(1 for v in steps.values() if v.get("eager") == v.get("graph"))
    print("  graph tokens identical to eager on %d of %d steps" % (same, len(steps)))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: llama_summary.py LOG LABEL")
    main(sys.argv[1], sys.argv[2])
