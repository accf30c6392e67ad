import CampaignHTTP2
#if canImport(Glibc)
import Glibc
#endif

/// nghttp2 alone: a client and a server session back to back in memory, no
/// TLS, no sockets: requests (APNs-shaped headers, a 150-byte body) and 200
/// answers per second, on this thread. What the README's "why nghttp2" cites.
func runH2Sessions(_ args: [String]) throws {
    var requests = 200_000, batch = 100
    var i = 0
    while i < args.count {
        if args[i] == "--requests" { requests = Int(args[i + 1])!; i += 1 }
        if args[i] == "--streams" { batch = Int(args[i + 1])!; i += 1 }
        i += 1
    }
    let client = try H2Session(role: .client, settings: [(id: 2, value: 0), (id: 4, value: 1 << 20)])
    let server = try H2Session(role: .server, settings: [(id: 3, value: 1000)])
    client.keptHeaders = [Array(":status".utf8)]
    let template = RequestTemplate([(":method", "POST", 0), (":scheme", "https", 0), (":path", nil, 74), (":authority", "api.push.apple.com", 0),
                                    ("apns-topic", "com.example.app", 0), ("apns-push-type", "alert", 0), ("apns-id", nil, 36)])
    let body = [UInt8](repeating: 0x41, count: 150)
    var toServer: [UInt8] = [], toClient: [UInt8] = []
    var start = timespec(), end = timespec()
    clock_gettime(CLOCK_MONOTONIC, &start)
    var sent = 0, answered = 0
    while answered < requests {
        while sent < requests && sent - answered < batch {
            _ = try client.submitRequest(template, body: body, bodyStart: 0) { slot, room in
                let n = slot == 0 ? 74 : 36
                let hex: StaticString = "0123456789abcdef"
                for k in 0..<n { room[k] = hex.utf8Start[(sent &+ k) % 16] }
                if slot == 0 { for (k, c) in "/3/device/".utf8.enumerated() { room[k] = c } }
                return n
            }
            sent += 1
        }
        toServer.removeAll(keepingCapacity: true)
        try client.send(into: &toServer)
        try server.receive(toServer, count: toServer.count)
        for case .message(let stream, _, _) in server.drainEvents() {
            try server.submitResponse(stream: stream, headers: [.init(":status", "200")], body: [])
        }
        toClient.removeAll(keepingCapacity: true)
        try server.send(into: &toClient)
        try client.receive(toClient, count: toClient.count)
        for event in client.drainEvents() {
            switch event {
            case .message: answered += 1
            case .streamClosed(_, let code) where code != 0: throw H2Error("stream refused: \(code)")
            default: break
            }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end)
    let seconds = Double(end.tv_sec - start.tv_sec) + Double(end.tv_nsec - start.tv_nsec) / 1e9
    print(#"{"requests":\#(requests),"seconds":\#(seconds),"per_second":\#(Int(Double(requests) / seconds))}"#)
}
