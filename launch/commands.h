/* launch/ — the `trident` command line. Each subcommand is one function taking the
 * arguments after its name (argv[0] is the subcommand) and returning the process exit code:
 * 0 success, 1 runtime failure, 2 bad usage / bad config / bad input. */
#ifndef TR_COMMANDS_H
#define TR_COMMANDS_H

#include "core/core.h"

TR_MUST_CHECK int tr_cmd_train(int argc, char **argv);
TR_MUST_CHECK int tr_cmd_preprocess(int argc, char **argv);
TR_MUST_CHECK int tr_cmd_topo(int argc, char **argv);
TR_MUST_CHECK int tr_cmd_launch(int argc, char **argv);
TR_MUST_CHECK int tr_cmd_schedule(int argc, char **argv);
TR_MUST_CHECK int tr_cmd_plan(int argc, char **argv);
TR_MUST_CHECK int tr_cmd_sweep(int argc, char **argv);
TR_MUST_CHECK int tr_cmd_generate(int argc, char **argv);
TR_MUST_CHECK int tr_cmd_convert(int argc, char **argv);
TR_MUST_CHECK int tr_cmd_eval(int argc, char **argv);

#endif
