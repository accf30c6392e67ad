#if canImport(Glibc)
import Glibc
#endif

/// Runs `body` on a new detached thread, without Foundation.
public func startDetachedThread(stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
    pthread_detach(startThread(stackSize: stackSize, body))
}

/// Runs `body` on a new thread; `pthread_join` the result to wait for it
/// (joining also orders everything the thread wrote before what follows).
/// The project's one way to start a thread.
public func startThread(stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) -> pthread_t {
    final class Start { let body: () -> Void; init(_ body: @escaping () -> Void) { self.body = body } }
    let start = Unmanaged.passRetained(Start(body)).toOpaque()
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    if let stackSize { pthread_attr_setstacksize(&attributes, stackSize) }
    var handle = pthread_t()
    let result = pthread_create(&handle, &attributes, { raw in
        Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue().body()
        return nil
    }, start)
    precondition(result == 0, "cannot start a thread: \(result)")
    return handle
}
