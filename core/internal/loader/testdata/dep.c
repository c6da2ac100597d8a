/* SPDX-License-Identifier: Apache-2.0 */
/* A library a test plugin links against and the test then removes. */
int gpurt_test_dep(void) { return 1; }
