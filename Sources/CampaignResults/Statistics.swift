#if canImport(Glibc)
import Glibc
#else
import Foundation
#endif

/// The statistics `campaign results` reports per group of an experiment:
/// conversion rates with their intervals, differences against the control,
/// and tests of independence and of sample-ratio mismatch.
///
/// Each function computes what a named scipy or statsmodels function
/// computes, in the same order of operations where that matters, so that a
/// report can be checked against `scripts/results_stats_peer.py` to 1e-9
/// relative (and the counts and degrees of freedom exactly). Undefined
/// results (no trials, a pooled rate of 0 or 1, an expected count of 0) are
/// `nil`, where the Python libraries give `nan` or raise.
public enum Statistics {

    // MARK: - Distributions

    /// The standard normal distribution.
    public enum Normal {
        /// 1/√2, as `M_SQRT1_2`: scipy's `ndtr` scales by it rather than dividing by √2.
        static let reciprocalSquareRootOfTwo = 0.70710678118654752440
        /// √(2π), the constant of Cephes' `ndtri`.
        static let squareRootOfTwoPi = 2.50662827463100050242
        /// exp(−2): Cephes' `ndtri` switches from its central to its tail approximations here.
        static let expMinusTwo = 0.13533528323661269189

        /// P(Z ≤ z), as `scipy.stats.norm.cdf`. From `erfc` rather than
        /// `1 + erf`, so that the lower tail keeps its relative accuracy.
        public static func cdf(_ z: Double) -> Double {
            0.5 * erfc(-z * reciprocalSquareRootOfTwo)
        }

        /// P(Z > z), as `scipy.stats.norm.sf`: 0.5·erfc(z/√2), which stays
        /// accurate relative to its size far into the upper tail (p-values
        /// like 1e-200), where 1 − cdf(z) would be 0.
        public static func survival(_ z: Double) -> Double {
            0.5 * erfc(z * reciprocalSquareRootOfTwo)
        }

        /// The z with P(Z ≤ z) = p, as `scipy.stats.norm.ppf`; nil unless 0 < p < 1.
        ///
        /// This is Cephes' `ndtri` (S. L. Moshier), the algorithm and
        /// coefficients scipy's `scipy.special.ndtri` uses (relative error
        /// below 1e-15), evaluated in the same order, so that critical values
        /// are the very doubles statsmodels computes its intervals from: a
        /// Wilson bound at 0 successes is then the same rounding residue
        /// (e.g. 5.6e-17 or 0) as statsmodels', not merely close to it.
        public static func quantile(_ p: Double) -> Double? {
            guard p > 0, p < 1 else { return nil }
            var y = p
            var lowerTail = true
            if y > 1.0 - expMinusTwo {
                y = 1.0 - y
                lowerTail = false
            }
            if y > expMinusTwo {
                y -= 0.5
                let y2 = y * y
                let x = y + y * (y2 * polynomial(y2, centralNumerator) / monicPolynomial(y2, centralDenominator))
                return x * squareRootOfTwoPi
            }
            let x = (-2.0 * log(y)).squareRoot()
            let x0 = x - log(x) / x
            let z = 1.0 / x
            let x1 = x < 8.0
                ? z * polynomial(z, nearTailNumerator) / monicPolynomial(z, nearTailDenominator)
                : z * polynomial(z, farTailNumerator) / monicPolynomial(z, farTailDenominator)
            return lowerTail ? -(x0 - x1) : x0 - x1
        }

        /// The z with P(Z > z) = q, as `scipy.stats.norm.isf` (which is −ndtri(q)); nil unless 0 < q < 1.
        public static func inverseSurvival(_ q: Double) -> Double? {
            quantile(q).map { -$0 }
        }

        /// Cephes' `polevl`: coefficients from the highest power down.
        static func polynomial(_ x: Double, _ coefficients: [Double]) -> Double {
            var sum = coefficients[0]
            for coefficient in coefficients.dropFirst() { sum = sum * x + coefficient }
            return sum
        }

        /// Cephes' `p1evl`: as `polynomial`, with a leading coefficient of 1 that is not stored.
        static func monicPolynomial(_ x: Double, _ coefficients: [Double]) -> Double {
            var sum = x + coefficients[0]
            for coefficient in coefficients.dropFirst() { sum = sum * x + coefficient }
            return sum
        }

        /// ndtri for |p − 0.5| ≤ 0.5 − exp(−2): p = 0.5 + w, x/√(2π) = w + w³·R(w²)/S(w²).
        static let centralNumerator = [
            -5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
            1.39312609387279679503E1, -1.23916583867381258016E0,
        ]
        static let centralDenominator = [
            1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1, -2.25462687854119370527E2,
            2.00260212380060660359E2, -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0,
        ]
        /// ndtri for exp(−32) < p ≤ exp(−2), with z = √(−2 log p) between 2 and 8.
        static let nearTailNumerator = [
            4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
            4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
            -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4,
        ]
        static let nearTailDenominator = [
            1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
            1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
            -3.80806407691578277194E-2, -9.33259480895457427372E-4,
        ]
        /// ndtri for p ≤ exp(−32), with z between 8 and 64.
        static let farTailNumerator = [
            3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
            1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
            3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9,
        ]
        static let farTailDenominator = [
            6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0, 2.16236993594496635890E-1,
            1.34204006088543189037E-2, 3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9,
        ]
    }

    /// The chi-squared distribution.
    public enum ChiSquared {
        /// P(X > x) for k degrees of freedom, as `scipy.stats.chi2.sf` (`scipy.special.chdtrc`):
        /// the regularized upper incomplete gamma function Q(k/2, x/2). 1 for x ≤ 0;
        /// nil for k < 1 or x NaN.
        ///
        /// Within 1e-12 of scipy (relative, down to the smallest normal double)
        /// for k up to 1000; near x = k the error grows like k·ε (3e-12 at
        /// k = 10⁴, 3e-10 at k = 10⁶), from the factor x^a·e^−x/Γ(a) below.
        public static func survival(_ x: Double, degreesOfFreedom k: Int) -> Double? {
            guard k >= 1, !x.isNaN else { return nil }
            if x <= 0 { return 1 }
            if x == .infinity { return 0 }
            return regularizedUpperGamma(Double(k) / 2, x / 2)
        }

        /// log of the largest double, Cephes' MAXLOG: scipy's `igamc` returns
        /// 0 once x^a·e^−x/Γ(a) falls below exp(−MAXLOG), and so does this.
        static let largestLog = 7.09782712893383996843E2

        /// Q(a, x) = Γ(a, x)/Γ(a) for a > 0, x > 0 (Numerical Recipes' `gammq`):
        /// the power series of P(a, x) for x < a + 1, where Q = 1 − P is at
        /// least about 0.2 and loses nothing to the subtraction; otherwise
        /// Legendre's continued fraction for Q itself by the modified Lentz
        /// method, which keeps tiny p-values (1e-200) accurate relative to
        /// their size. Both share the factor x^a·e^−x/Γ(a), taken through its
        /// logarithm (`lgamma`): its relative error is about ε·|a·log x|,
        /// below 1e-12 for the degrees of freedom a table of groups has.
        static func regularizedUpperGamma(_ a: Double, _ x: Double) -> Double {
            var sign: Int32 = 0  // lgamma_r: lgamma's sign goes to a global, a data race between threads
            let logFactor = a * log(x) - x - lgamma_r(a, &sign)
            let epsilon = Double.ulpOfOne
            let maximumTerms = 100_000
            if x < a + 1 {
                var denominator = a
                var term = 1.0 / a
                var sum = term
                for _ in 0..<maximumTerms {
                    denominator += 1
                    term *= x / denominator
                    sum += term
                    if abs(term) < abs(sum) * epsilon { break }
                }
                return 1.0 - sum * exp(logFactor)
            }
            if logFactor < -largestLog { return 0 }
            let tiny = Double.leastNormalMagnitude / epsilon
            var b = x + 1.0 - a
            var c = 1.0 / tiny
            var d = 1.0 / b
            var fraction = d
            for i in 1...maximumTerms {
                let an = -Double(i) * (Double(i) - a)
                b += 2
                d = an * d + b
                if abs(d) < tiny { d = tiny }
                c = b + an / c
                if abs(c) < tiny { c = tiny }
                d = 1.0 / d
                let step = d * c
                fraction *= step
                if abs(step - 1.0) < epsilon { break }
            }
            return exp(logFactor) * fraction
        }
    }

    // MARK: - One proportion

    /// successes/trials as statsmodels divides it (`count / nobs`); nil unless 0 ≤ successes ≤ trials and trials > 0.
    public static func proportion(successes: Int, trials: Int) -> Double? {
        guard trials > 0, successes >= 0, successes <= trials else { return nil }
        return Double(successes) / Double(trials)
    }

    /// Wilson's score interval for a binomial proportion (Wilson 1927;
    /// Newcombe 1998, "Two-sided confidence intervals for the single
    /// proportion", method 3), as
    /// `statsmodels.stats.proportion.proportion_confint(count, nobs, alpha=1-confidence, method="wilson")`:
    /// crit = norm.isf(alpha/2), center = (p + crit²/2n)/(1 + crit²/n),
    /// half-width = crit·√(p(1−p)/n + crit²/4n²)/(1 + crit²/n), both bounds
    /// clipped to [0, 1] as statsmodels clips them (at 0 or n successes a
    /// bound is 0 or 1 up to rounding). Chosen over the Wald interval
    /// because it stays inside [0, 1] and keeps its coverage at rates near 0,
    /// which is where push conversion rates live. nil for no trials, a count
    /// outside 0...trials, or a confidence outside (0, 1).
    public static func wilson(successes: Int, trials: Int, confidence: Double) -> (low: Double, high: Double)? {
        guard let p = proportion(successes: successes, trials: trials),
              confidence > 0, confidence < 1,
              let crit = Normal.inverseSurvival((1.0 - confidence) / 2.0) else { return nil }
        let n = Double(trials)
        // statsmodels' `crit**2` is libm's pow(crit, 2), which can be 1 ulp
        // from crit·crit; the optimizer turns pow(x, 2) into x·x in release
        // builds only, so x·x it is, the same in every build. For the
        // confidences 0.500...0.999 in steps of 0.001 but 0.56 the two agree.
        let crit2 = crit * crit
        let denominator = 1 + crit2 / n
        let center = (p + crit2 / (2 * n)) / denominator
        let halfWidth = crit * (p * (1.0 - p) / n + crit2 / (4.0 * (n * n))).squareRoot() / denominator
        return (low: clippedToUnit(center - halfWidth), high: clippedToUnit(center + halfWidth))
    }

    /// `np.clip(x, 0, 1)`.
    static func clippedToUnit(_ x: Double) -> Double {
        min(max(x, 0), 1)
    }

    // MARK: - Two proportions

    /// Newcombe's hybrid score interval for p1 − p2 of two independent
    /// proportions (Newcombe 1998, "Interval estimation for the difference
    /// between independent proportions", method 10), as
    /// `statsmodels.stats.proportion.confint_proportions_2indep(count1, nobs1, count2, nobs2, method="newcomb", compare="diff", alpha=1-confidence)`:
    /// with d = p1 − p2 and each group's Wilson interval (l1, u1) and (l2, u2),
    /// low = d − √((p1 − l1)² + (u2 − p2)²), high = d + √((p2 − l2)² + (u1 − p1)²).
    /// It inherits Wilson's behaviour at rates near 0 and needs no
    /// iteration. nil when either group has no trials, a count is outside
    /// 0...trials, or the confidence is outside (0, 1).
    public static func newcombe(successes1: Int, trials1: Int, successes2: Int, trials2: Int,
                                confidence: Double) -> (difference: Double, low: Double, high: Double)? {
        guard let p1 = proportion(successes: successes1, trials: trials1),
              let p2 = proportion(successes: successes2, trials: trials2),
              let interval1 = wilson(successes: successes1, trials: trials1, confidence: confidence),
              let interval2 = wilson(successes: successes2, trials: trials2, confidence: confidence) else { return nil }
        let difference = p1 - p2
        let (lowSide1, highSide2) = (p1 - interval1.low, interval2.high - p2)
        let (lowSide2, highSide1) = (p2 - interval2.low, interval1.high - p1)
        let below = (lowSide1 * lowSide1 + highSide2 * highSide2).squareRoot()
        let above = (lowSide2 * lowSide2 + highSide1 * highSide1).squareRoot()
        return (difference: difference, low: difference - below, high: difference + above)
    }

    /// The two-sided z-test of p1 = p2 with the pooled variance, as
    /// `statsmodels.stats.proportion.proportions_ztest(count=[c1, c2], nobs=[n1, n2])`:
    /// z = (p1 − p2)/√(p̄(1 − p̄)(1/n1 + 1/n2)) with p̄ = (c1 + c2)/(n1 + n2),
    /// p-value = 2·sf(|z|). The pooled variance is the variance under the
    /// null hypothesis, which is what makes this the same test as the 2×2
    /// chi-squared test (z² = χ²). nil when it is undefined: no trials in a
    /// group, or a pooled rate of 0 or 1 (nobody or everybody converted,
    /// where statsmodels divides 0 by 0 and gives nan).
    public static func twoProportionZTest(successes1: Int, trials1: Int,
                                          successes2: Int, trials2: Int) -> (z: Double, pValue: Double)? {
        guard let p1 = proportion(successes: successes1, trials: trials1),
              let p2 = proportion(successes: successes2, trials: trials2) else { return nil }
        let pooled = (Double(successes1) + Double(successes2)) / (Double(trials1) + Double(trials2))
        let variance = pooled * (1 - pooled) * (1.0 / Double(trials1) + 1.0 / Double(trials2))
        guard variance > 0 else { return nil }
        let z = (p1 - p2) / variance.squareRoot()
        return (z: z, pValue: Normal.survival(abs(z)) * 2)
    }

    /// The lift of a rate over a baseline, (rate − baseline)/baseline; nil when the baseline is 0.
    public static func relativeLift(rate: Double, baseline: Double) -> Double? {
        guard baseline != 0 else { return nil }
        return (rate - baseline) / baseline
    }

    // MARK: - Chi-squared tests

    /// Pearson's chi-squared test of independence on an r × c table of
    /// counts (here groups × [converted, not converted]), without Yates'
    /// continuity correction, as `scipy.stats.chi2_contingency(table, correction=False)`:
    /// expected = row total · column total / total, statistic = Σ (o − e)²/e,
    /// (r − 1)(c − 1) degrees of freedom. Without the correction it is the
    /// same test as the pooled z-test for two groups and extends it to any
    /// number. A table with one row or one column has 0 degrees of freedom,
    /// statistic 0 and p-value 1, as scipy returns. nil when the table is
    /// empty, ragged or has a negative count, or an expected count is 0 (a
    /// row or column of zeros, where scipy raises).
    public static func chiSquaredIndependence(_ table: [[Int]]) -> (statistic: Double, degreesOfFreedom: Int, pValue: Double)? {
        guard let columnCount = table.first?.count, columnCount > 0,
              table.allSatisfy({ $0.count == columnCount && $0.allSatisfy { $0 >= 0 } }) else { return nil }
        // In Double, as scipy sums them (exact below 2^53, and no overflow trap).
        let rowTotals = table.map { $0.reduce(0.0) { $0 + Double($1) } }
        let columnTotals = (0..<columnCount).map { column in table.reduce(0.0) { $0 + Double($1[column]) } }
        let total = rowTotals.reduce(0, +)
        var statistic = 0.0
        for (row, counts) in table.enumerated() {
            for (column, count) in counts.enumerated() {
                let expected = rowTotals[row] * columnTotals[column] / total
                guard expected > 0 else { return nil }
                let deviation = Double(count) - expected
                statistic += deviation * deviation / expected
            }
        }
        let degreesOfFreedom = (table.count - 1) * (columnCount - 1)
        if degreesOfFreedom == 0 { return (statistic: 0, degreesOfFreedom: 0, pValue: 1) }
        guard let pValue = ChiSquared.survival(statistic, degreesOfFreedom: degreesOfFreedom) else { return nil }
        return (statistic: statistic, degreesOfFreedom: degreesOfFreedom, pValue: pValue)
    }

    /// Pearson's chi-squared goodness-of-fit test of counts against planned
    /// shares, as `scipy.stats.chisquare(observed, expected)` with
    /// expected[i] = total · weights[i] / Σ weights, k − 1 degrees of
    /// freedom. Used for sample-ratio mismatch: groups whose sizes stray from
    /// the planned split mean the assignment, not the message, may explain a
    /// difference. nil for fewer than 2 groups, a count per weight mismatch, a
    /// negative count, a total of 0, or a weight that is not finite and positive.
    public static func goodnessOfFit(observed: [Int], weights: [Double]) -> (statistic: Double, degreesOfFreedom: Int, pValue: Double)? {
        guard observed.count >= 2, observed.count == weights.count,
              observed.allSatisfy({ $0 >= 0 }), weights.allSatisfy({ $0.isFinite && $0 > 0 }) else { return nil }
        let total = observed.reduce(0.0) { $0 + Double($1) }
        let weightTotal = weights.reduce(0, +)
        guard total > 0, weightTotal.isFinite else { return nil }
        var statistic = 0.0
        for (count, weight) in zip(observed, weights) {
            let expected = total * weight / weightTotal
            let deviation = Double(count) - expected
            statistic += deviation * deviation / expected
        }
        let degreesOfFreedom = observed.count - 1
        guard let pValue = ChiSquared.survival(statistic, degreesOfFreedom: degreesOfFreedom) else { return nil }
        return (statistic: statistic, degreesOfFreedom: degreesOfFreedom, pValue: pValue)
    }
}
