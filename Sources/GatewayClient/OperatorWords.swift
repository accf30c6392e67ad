// Numbers as the operator reads them in reports, logs and sentences.

package func format3(_ x: Double) -> String {
    let ms = Int((x * 1000).rounded())
    let frac = String(ms % 1000)
    return "\(ms / 1000).\(String(repeating: "0", count: 3 - frac.count))\(frac)"
}

package func format1(_ x: Double) -> String {
    x == x.rounded() ? String(Int(x)) : String(Double(Int(x * 10)) / 10)
}

/// A rate as the operator reads it: "1200/s", "4.5/s", or below one a second "0.25/s" (not "0/s").
package func rateText(_ perSecond: Double) -> String {
    if perSecond >= 10 || perSecond <= 0 { return "\(Int(max(0, perSecond)))/s" }
    if perSecond < 0.005 { return "under 0.01/s" }
    let digits = perSecond >= 1 ? 10.0 : 100.0
    return "\(Double(Int((perSecond * digits).rounded())) / digits)/s"
}

/// A wait as the operator reads it: "1.5 s", "30 s", or below a second "50 ms" (not "0.0 s").
package func waitText(_ seconds: Double) -> String {
    seconds >= 1 || seconds <= 0 ? "\(format1(max(0, seconds))) s" : "\(max(1, Int((seconds * 1000).rounded()))) ms"
}
