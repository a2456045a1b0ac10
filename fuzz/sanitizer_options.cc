// LeakSanitizer suppressions built into every fuzz target, both the libFuzzer
// executable and the replay driver (fuzz/CMakeLists.txt), so that they hold
// however the binary is run: by run_fuzzer, by CTest, or by hand on a crash
// file. The sanitizer runtime calls this weak hook at startup.
//
// leak:libmozjs-102.so: SpiderMonkey (handlers/js_runtime.cc, which
// fuzz_command_request runs) keeps much of its malloc'd state reachable only
// from its garbage-collected heap, which it maps with mmap and LeakSanitizer
// does not scan, so while the engine is alive its own allocations look
// leaked: libFuzzer's per-input leak check (which runs with the thread's
// engine still up) stopped at the first seed that ran a JavaScript command
// ("Direct leak ... allocated from libmozjs-102.so.0", 594 allocations).
// JS_ShutDown at exit (handlers/js_thread_engine.cc) releases them, so the check
// at exit is not where they showed up. The library is not instrumented and is built without frame
// pointers, so each such stack is one frame deep and names the library; the
// suppression matches only allocations whose frames are in it, and
// allocations made by sluice's own code are still checked. Growth within
// the engine is still caught by -rss_limit_mb (run_fuzzer).
extern "C" const char* __lsan_default_suppressions() { return "leak:libmozjs-102.so\n"; }
