#if canImport(Glibc)
import Glibc
#endif

/// Whether this test process runs under ThreadSanitizer or AddressSanitizer
/// (`make sanitize`): their runtimes are linked into the process.
///
/// Tests that judge a rate (the pool sizer's steps) judge correctness only
/// under a sanitizer: the simulator they start in this process runs several
/// times slower there, and is then what limits the send (under
/// ThreadSanitizer, 336 a second over 4 connections at a distance, 306 over
/// 8, so the pool rightly stepped back).
public enum Sanitizers {
    public static let active: Bool = {
        guard let process = dlopen(nil, RTLD_NOW) else { return false }
        return dlsym(process, "__tsan_init") != nil || dlsym(process, "__asan_init") != nil
    }()
}
