// The limits our numbers are measured against: libcsv tokenizing alone, and
// a writer that sends pre-encoded frames over one TLS connection with no
// bookkeeping at all.

import Foundation
import APNSWire
import CampaignIO
import CampaignPlan
import PlanStream
import CampaignSend
import CampaignTLS
import ByteStreams
import BinaryProvider

func tokenizeCSV(path: String) throws {
    let source = try InputFile.open(path)
    // Counts rows with libcsv and nothing else (C callbacks that add one):
    // the ceiling for `campaign plan` on CSV.
    let tokenizer = CSVTokenizer()
    var counts = CSVTokenizer.Counts()
    var buffer = [UInt8](repeating: 0, count: 1 << 18)
    let start = Deadline.now()
    while true {
        let n = try source.read(into: &buffer)
        if n == 0 { break }
        try buffer.withUnsafeBytes { try tokenizer.count(UnsafeRawBufferPointer(rebasing: $0[0..<n]), into: &counts) }
    }
    try tokenizer.finishCounting(into: &counts)
    let seconds = Double(Deadline.now().nanoseconds - start.nanoseconds) / 1e9
    print(String(format: "{\"rows\":%d,\"seconds\":%.3f,\"rows_per_second\":%.0f}", counts.rows, seconds, Double(counts.rows) / seconds))
}

/// Pre-encoded frames over one TLS connection into a running simulator, then
/// a proof (an invalid token size) so the time covers acceptance, not just writing.
/// With `--plan`, the frames are the plan's own, encoded as `campaign send`
/// encodes them, before the clock starts: the same bytes on the wire and the
/// same work for the simulator, with none of send's reading or bookkeeping.
func runWriter(_ args: [String]) throws {
    var port = 0, certs = "", count = 1_000_000
    var planPath: String? = nil
    var writeBytes = 16_384
    var i = 0
    while i < args.count {
        switch args[i] {
        case "--port": port = Int(args[i + 1])!; i += 1
        case "--certs": certs = args[i + 1]; i += 1
        case "--notifications": count = Int(args[i + 1])!; i += 1
        case "--plan": planPath = args[i + 1]; i += 1
        case "--write-bytes": writeBytes = Int(args[i + 1])!; i += 1
        default: fatalError("unknown option \(args[i])")
        }
        i += 1
    }
    let identity = try TLSIdentity.pem(certificate: certs + "/client.pem", key: certs + "/client.key", passphrase: nil)
    let context = try TLSContext.client(identity: identity, trust: .file(certs + "/ca.pem"))
    var frames: [UInt8] = []
    if let planPath {
        let plan = try PlanReader(path: planPath)
        let encoder = PlanFrameEncoder(header: plan.header)
        count = 0
        while try plan.nextView({ record in
            encoder.append(record, sentAt: 0, to: &frames)
            count += 1
        }) {}
    } else {
        frames = encodedNotifications(count, format: .enhanced, offset: 0)
    }
    var proof: [UInt8] = []
    NotificationEncoder.appendEnhanced(identifier: 0xFFFF_FFFF, expiry: 0, token: [0], payload: Array(#"{"aps":{}}"#.utf8), to: &proof)
    let connection = try TLSConnection.connect(host: "127.0.0.1", port: port, context: context)
    let start = Deadline.now()
    try frames.withUnsafeBytes { raw in
        var offset = 0
        while offset < raw.count {
            let end = min(raw.count, offset + writeBytes)
            try connection.write(UnsafeRawBufferPointer(rebasing: raw[offset..<end]))
            offset = end
        }
    }
    try connection.write(proof)
    var response = [UInt8](repeating: 0, count: 6)
    var got = 0
    while got < 6 {
        let n = try connection.read(into: &response, deadline: .after(seconds: 120))
        if n == 0 { break }
        got += n
    }
    let seconds = Double(Deadline.now().nanoseconds - start.nanoseconds) / 1e9
    guard got == 6, ErrorResponse(bytes: response)?.identifier == 0xFFFF_FFFF else { fatalError("no proof from the simulator") }
    print(String(format: "{\"notifications\":%d,\"seconds\":%.3f,\"per_second\":%.0f}", count, seconds, Double(count) / seconds))
}
