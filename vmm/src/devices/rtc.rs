//! The MC146818 CMOS real-time clock (ports 0x70/0x71), read-only, showing
//! virtual time: wall time is `epoch + virtual time`, so `date` in a guest is
//! as deterministic as everything else. Registers are BCD, 24-hour (Linux on
//! x86 assumes BCD). Writes to the time registers are ignored; the RAM bytes
//! read back what was written.

use serde::{Deserialize, Serialize};

use crate::clock::Vtime;

/// Default wall-clock time at virtual time zero: 2026-01-01T00:00:00Z.
pub const DEFAULT_EPOCH: u64 = 1_767_225_600;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rtc {
    /// Unix seconds at virtual time zero.
    epoch: u64,
    index: u8,
    /// General-purpose CMOS bytes the guest wrote.
    ram: Vec<u8>,
}

const SECONDS: u8 = 0x00;
const MINUTES: u8 = 0x02;
const HOURS: u8 = 0x04;
const WEEKDAY: u8 = 0x06;
const DAY: u8 = 0x07;
const MONTH: u8 = 0x08;
const YEAR: u8 = 0x09;
const STATUS_A: u8 = 0x0A;
const STATUS_B: u8 = 0x0B;
const STATUS_C: u8 = 0x0C;
const STATUS_D: u8 = 0x0D;
const CENTURY: u8 = 0x32;

fn bcd(v: u64) -> u8 {
    ((v / 10 % 10) << 4 | (v % 10)) as u8
}

/// (year, month 1-12, day 1-31) of a day count since 1970-01-01.
/// Howard Hinnant's civil-from-days algorithm.
fn civil(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl Rtc {
    pub fn new(epoch: u64) -> Rtc {
        Rtc { epoch, index: 0, ram: vec![0; 128] }
    }

    pub fn claims(port: u16) -> bool {
        matches!(port, 0x70 | 0x71)
    }

    fn register(&self, reg: u8, now: Vtime) -> u8 {
        let t = self.epoch + now.0 / 1_000_000_000;
        let days = (t / 86_400) as i64;
        let secs = t % 86_400;
        let (year, month, day) = civil(days);
        match reg {
            SECONDS => bcd(secs % 60),
            MINUTES => bcd(secs / 60 % 60),
            HOURS => bcd(secs / 3600),
            // 1970-01-01 was a Thursday; the RTC counts Sunday as 1.
            WEEKDAY => bcd(((days + 4).rem_euclid(7) + 1) as u64),
            DAY => bcd(day),
            MONTH => bcd(month),
            YEAR => bcd(year.rem_euclid(100) as u64),
            CENTURY => bcd((year / 100) as u64),
            STATUS_A => 0x26, // 32.768 kHz divider, no update in progress
            STATUS_B => 0x02, // 24-hour, BCD, no interrupts
            STATUS_C => 0,
            STATUS_D => 0x80, // battery good
            r => self.ram[usize::from(r & 0x7F)],
        }
    }

    pub fn pio_write(&mut self, port: u16, val: u8) {
        if port == 0x70 {
            self.index = val & 0x7F; // bit 7 is the NMI mask
        } else if self.index > STATUS_D && self.index != CENTURY {
            self.ram[usize::from(self.index)] = val;
        }
    }

    pub fn pio_read(&mut self, port: u16, now: Vtime) -> u8 {
        if port == 0x70 {
            self.index
        } else {
            self.register(self.index, now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(rtc: &mut Rtc, reg: u8, now: Vtime) -> u8 {
        rtc.pio_write(0x70, reg);
        rtc.pio_read(0x71, now)
    }

    #[test]
    fn shows_epoch_plus_virtual_time() {
        let mut rtc = Rtc::new(DEFAULT_EPOCH);
        let t = Vtime::from_secs(3600 * 25 + 61); // 2026-01-02 01:01:01
        assert_eq!(read(&mut rtc, YEAR, t), 0x26);
        assert_eq!(read(&mut rtc, CENTURY, t), 0x20);
        assert_eq!(read(&mut rtc, MONTH, t), 0x01);
        assert_eq!(read(&mut rtc, DAY, t), 0x02);
        assert_eq!(read(&mut rtc, HOURS, t), 0x01);
        assert_eq!(read(&mut rtc, MINUTES, t), 0x01);
        assert_eq!(read(&mut rtc, SECONDS, t), 0x01);
        // 2026-01-02 is a Friday: day 6 counting Sunday as 1.
        assert_eq!(read(&mut rtc, WEEKDAY, t), 0x06);
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil((DEFAULT_EPOCH / 86_400) as i64), (2026, 1, 1));
    }

    #[test]
    fn cmos_ram_keeps_writes_but_not_time() {
        let mut rtc = Rtc::new(0);
        rtc.pio_write(0x70, 0x40);
        rtc.pio_write(0x71, 0xAB);
        assert_eq!(read(&mut rtc, 0x40, Vtime(0)), 0xAB);
        rtc.pio_write(0x70, SECONDS);
        rtc.pio_write(0x71, 0x59);
        assert_eq!(read(&mut rtc, SECONDS, Vtime(0)), 0x00);
    }
}
