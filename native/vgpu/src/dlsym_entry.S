/*
 * dlsym entry: asks vgpu_dlsym_lookup() whether the symbol is one we wrap and otherwise jumps
 * (not calls) to the real dlsym, so the caller's return address is unchanged and RTLD_NEXT is
 * resolved relative to the real caller, not to libvgpu.
 */
	.text
	.globl dlsym
	.type dlsym, @function
#if defined(__x86_64__)
dlsym:
	.cfi_startproc
	pushq %rdi
	.cfi_adjust_cfa_offset 8
	pushq %rsi
	.cfi_adjust_cfa_offset 8
	subq $8, %rsp
	.cfi_adjust_cfa_offset 8
	call vgpu_dlsym_lookup
	addq $8, %rsp
	.cfi_adjust_cfa_offset -8
	popq %rsi
	.cfi_adjust_cfa_offset -8
	popq %rdi
	.cfi_adjust_cfa_offset -8
	testq %rax, %rax
	jnz 1f
	jmp *vgpu_real_dlsym(%rip)
1:
	ret
	.cfi_endproc
#elif defined(__aarch64__)
dlsym:
	stp x29, x30, [sp, #-32]!
	mov x29, sp
	stp x0, x1, [sp, #16]
	bl vgpu_dlsym_lookup
	mov x2, x0
	ldp x0, x1, [sp, #16]
	ldp x29, x30, [sp], #32
	cbnz x2, 1f
	adrp x16, vgpu_real_dlsym
	ldr x16, [x16, :lo12:vgpu_real_dlsym]
	br x16
1:
	mov x0, x2
	ret
#else
#error "libvgpu: dlsym entry is written for x86-64 and aarch64"
#endif
	.size dlsym, .-dlsym
	.section .note.GNU-stack,"",@progbits
