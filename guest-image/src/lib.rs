//! Guests that hvsim can boot.
//!
//! `raw`: tiny freestanding x86-64 programs, assembled in-process by the
//! workspace itself (dynasm; no external assembler), that exercise the
//! machine: timers, halting, entropy, serial output, misbehaviour.

pub mod raw;
