// The exit codes of every operator command (`ecps status|scrub|kill|checkpoint`); which
// failure maps to which: cli/operator_call.h.
#ifndef ECPS_CLI_OPERATOR_EXIT_CODES_H_
#define ECPS_CLI_OPERATOR_EXIT_CODES_H_

namespace ecps {

inline constexpr int kStatusOk = 0;
inline constexpr int kStatusError = 1;        // refused (an error the coordinator answered)
inline constexpr int kStatusUnreachable = 2;  // any other failure: it was not reached, or lost
inline constexpr int kStatusBadToken = 3;     // the coordinator refused the token

}  // namespace ecps

#endif  // ECPS_CLI_OPERATOR_EXIT_CODES_H_
