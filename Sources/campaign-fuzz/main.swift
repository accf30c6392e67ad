#if canImport(Glibc)
import Glibc
#endif
import CampaignFuzzTargets
#if CAMPAIGN_FUZZING
import CIOShims
#endif

// campaign-fuzz TARGET PATH...   replays files (or every file of directories)
//                                through a target; exits 0 when all return.
// Built by `make fuzz` (-sanitize=fuzzer -D CAMPAIGN_FUZZING), the same
// command runs libFuzzer instead: campaign-fuzz TARGET [-flags] [CORPUS...].

func complain(_ message: String) {
    var line = message + "\n"
    line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
}

let targets = FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")
guard CommandLine.arguments.count >= 2, let target = FuzzTarget(rawValue: CommandLine.arguments[1]) else {
    complain("usage: campaign-fuzz TARGET [PATH...]   (targets: \(targets))")
    exit(64)
}

#if CAMPAIGN_FUZZING
nonisolated(unsafe) var selected = target
// libFuzzer sees the arguments without the target name.
var argc = CommandLine.argc - 1
var argv: [UnsafeMutablePointer<CChar>?] = [CommandLine.unsafeArgv[0]]
for i in 2..<Int(CommandLine.argc) { argv.append(CommandLine.unsafeArgv[i]) }
argv.append(nil)
let status = argv.withUnsafeMutableBufferPointer { buffer -> Int32 in
    var pointer = buffer.baseAddress
    return LLVMFuzzerRunDriver(&argc, &pointer) { data, size in
        selected.run(UnsafeRawBufferPointer(start: data, count: size))
        return 0
    }
}
exit(status)
#else
func inputs(_ path: String) -> [String] {
    var info = stat()
    guard stat(path, &info) == 0 else {
        complain("campaign-fuzz: \(path): no such file or directory")
        exit(66)
    }
    guard (info.st_mode & S_IFMT) == S_IFDIR else { return [path] }
    guard let dir = opendir(path) else { return [] }
    defer { closedir(dir) }
    var files: [String] = []
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
        if name.hasPrefix(".") { continue }
        files.append(path + "/" + name)
    }
    return files.sorted()
}

func contents(_ path: String) -> [UInt8] {
    guard let file = fopen(path, "rb") else { return [] }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65_536)
    while true {
        let n = fread(&chunk, 1, chunk.count, file)
        if n == 0 { return bytes }
        bytes += chunk[0..<n]
    }
}

var count = 0
for path in CommandLine.arguments.dropFirst(2) {
    for file in inputs(path) {
        target.run(contents(file))
        count += 1
    }
}
print("campaign-fuzz \(target.rawValue): \(count) inputs replayed, no failure")
#endif
