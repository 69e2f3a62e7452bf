// Clean shutdown on SIGTERM / SIGINT for the *_main.cc programs.
#ifndef PS_COMMON_SIGNALS_H_
#define PS_COMMON_SIGNALS_H_

namespace ps {

// Blocks SIGTERM and SIGINT in the calling thread and in every thread it
// creates afterwards. Call first in main(), before any thread starts.
void BlockTerminationSignals();

// Waits until SIGTERM or SIGINT arrives and returns its number.
int WaitForTerminationSignal();

}  // namespace ps

#endif  // PS_COMMON_SIGNALS_H_
